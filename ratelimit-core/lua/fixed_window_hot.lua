-- Fixed window, the hot path: a call that records, under a window of whole milliseconds (the
-- integer state of fixed_window.lua). Its own script, so that the call every admitted
-- decision makes reads as little as it can: the count is all it returns.
--
-- KEYS[1]: the limiter key
-- In front of this file (scripts.rs), two lines name the quota and increment the key:
--   `local capacity, window, cost = C, W, K`: the capacity (limit + burst, at least 1), the
--   window in milliseconds and the cost (from 1 to the capacity), and
--   `local count = redis.pcall('INCR', KEYS[1])` for a cost of 1, INCRBY by the cost otherwise.
-- A quota's own script has its capacity and window written in as numbers, and its cost 1 or
-- ARGV[1]: Redis turns each argument into a Lua string (~1,000 instructions) and each
-- coercion of one to a number is a strtod (~1,000 more), so an admitted call that reads none
-- costs what the peers' scripts cost. The shared script, for quotas past the number of own
-- scripts a store keeps, reads them from ARGV: capacity ARGV[1] (coerced), window ARGV[2]
-- (a string, coerced on a window's first hit only), cost ARGV[3] (absent for 1).
-- Behind this file, fixed_window.lua as a function, `fixed_window(KEYS, ARGV, fell)`, and a
-- last line that calls it, reached only on state of the wrong shape (see the end of this file).
-- Returns: admitted (and recorded): the count with this call's cost, from the cost to the
--          capacity; refused (nothing recorded): one integer `left * (2 * capacity + 1) +
--          count`, above the capacity, where count is the window's count with this call's
--          cost added (capped at 2 * capacity) and `left` the milliseconds from Redis'
--          millisecond to the window's end; {count, left} when that integer would not be exact
--          in a Lua number (2^53 or more). Or the RATELIMIT_STATE error reply (nothing written),
--          or Redis' own error (e.g. OOM on a full noeviction server).
--
-- Only keys that name their window reach it (the service composes the quota's identity into
-- every key): no other window ever writes their count. A bare key, which may be asked under
-- two windows, takes fixed_window.lua's path, which reads the count's expiry and refuses one
-- that is another window's (`StoreKey::names_its_window`; probes_redis_states: reading
-- PEXPIRETIME here cost every admitted call a third more of Redis' CPU).
--
-- What it reads, and why that is enough (measured in Redis' instructions per call: see
-- BENCHMARKS.md; a Lua number passed to redis.call is formatted back to text):
-- - An admitted call is INCR (or INCRBY) and one comparison with the capacity. No TIME, no
--   TTL: the key's expiry was set by the window's first hit, in this same script, so every key
--   written here expires at its window's last millisecond. The store places the reply's
--   `reset_at` with its estimate of Redis' clock (see src/store/redis/reply.rs); what is
--   admitted is Redis' count alone.
-- - The window's first hit (the count equals the cost and the key has no expiry: INCR made
--   it) reads TIME and sets the aligned expiry (SET .. PXAT, see there). A key that held 0 (a lease gave
--   everything back, refunds or a reward took its count there) keeps its expiry, its window.
-- - A refusal reads PTTL, for the wait, and takes the cost back out.
-- - A count below the cost (a negative value before the call), a refusal on a count that was
--   above MAX_CAPACITY (prelude.lua: no quota counts there) or on a key without an expiry
--   (PTTL -1), or a key INCR cannot count (another type, a string that is not an integer or
--   that would overflow) is the wrong shape: the cost is taken back (nothing is written) and
--   the call is answered with fixed_window.lua's error.
-- Why state not written here cannot make it admit more than the limit: the only state it
-- admits on is a non-negative integer; an admitted call only adds to it, so the count never
-- goes down but by this script's own take-backs and the lease return (units it recorded).
-- - A foreign integer with an expiry: counted as if it were calls already made, so at most
--   `capacity - value` calls are admitted until it expires (fewer than a fresh window).
-- - A foreign integer without one (SET, PERSIST): it never expires, so over its whole life
--   at most `capacity - value` calls are admitted (the count only grows), after which every
--   call reaches the refusal, reads PTTL -1 and is the wrong shape: an error, not an
--   allowance. Under-admission then an error: closed, never open.
-- - A negative integer: the first call's count is below its cost: the wrong shape.
-- Only a key that vanishes early (DEL, or an expiry shortened by another client) starts a
-- new count: that is a reset, which any client with the key can make.

if type(count) == 'number' then
  local left
  if count > cost then
    if count <= capacity then return count end
    -- Refused. The TTL says when the counted window ends, and that the key has an expiry at
    -- all: a count without one was not written here, nor one above prelude.lua's
    -- MAX_CAPACITY (4294967295, not in scope here: this file runs before the prelude).
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl >= 0 and count - cost <= 4294967295 then left = ttl + 1 end
  elseif count == cost then
    -- A count of 0 before the call: a key that held 0 kept its window, its expiry (a lease
    -- gave everything back, or refunds or a reward took its count to 0; after Redis' clock
    -- went back that window may lie ahead of TIME's, and the count stays in it, as in Rust).
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl >= 0 then
      if count <= capacity then return count end
      left = ttl + 1
    else
      -- The window's first hit (INCR made the key, without an expiry): give the key its
      -- window, from Redis' TIME, in milliseconds (exact: below 2^52, a double's floor of a
      -- quotient of integers is the integer quotient). The same window as prelude.lua's
      -- `time` and `idiv` give in microseconds, floor(now / window).
      local t = redis.call('TIME')
      local now = t[1] * 1000 + math.floor(t[2] / 1000)
      local ms = window + 0
      local stop = (math.floor(now / ms) + 1) * ms
      -- SET .. PXAT keeps the key through that millisecond when it is the clock's own (a
      -- first hit in the window's last millisecond); PEXPIREAT would delete it at once, and
      -- every call in that millisecond would be admitted as the window's first.
      redis.call('SET', KEYS[1], count, 'PXAT', stop - 1)
      if count <= capacity then return count end
      left = stop - now
    end
  end
  -- Refused, or the wrong shape: take the cost back out.
  redis.call('DECRBY', KEYS[1], cost)
  if left then
    -- A count above the capacity (kept from a larger limit under the same key) is refused
    -- all the same; the reply only needs to say so, within 2 * capacity.
    if count > 2 * capacity then count = 2 * capacity end
    local short = left * (2 * capacity + 1) + count
    if short < 9007199254740992 then return short end
    return {count, left}
  end
else
  -- Not an integer, one past 2^63 with the cost, or another type: the wrong shape. Any other
  -- error (OOM on a full noeviction server) is Redis' own, passed on.
  local e = count.err
  if not (string.find(e, '^WRONGTYPE') or string.find(e, 'not an integer')
      or string.find(e, 'would overflow')) then
    return count
  end
end
-- The wrong shape, nothing written: on to the last line (scripts.rs), which answers with
-- fixed_window.lua's error for its integer state.
