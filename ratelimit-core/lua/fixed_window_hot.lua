-- Fixed window, the hot path: a call that records, under a window of whole milliseconds, with
-- the short reply (see fixed_window.lua for the state, the arguments and the replies). This
-- file runs first, before prelude.lua and fixed_window.lua, and returns on every path but two,
-- which fall through to them: a call it does not take (`fell` stays nil) and state of the
-- wrong shape (`fell` = 'shape', nothing written), answered there with the prelude's error.
-- Written for Redis' CPU time, each line measured (redis-benchmark, INFO commandstats): no
-- closures or tables on the admitted path, an argument coerced only where a number is needed,
-- and the cost passed to INCRBY/DECRBY as the string it came as (a Lua number passed to
-- redis.call is formatted back to a string, ~0.25 us a call).

local fell
if ARGV[4] == '1' and ARGV[5] ~= '1' and ARGV[1] % 1000 == 0 then
  local key = KEYS[1]
  local count = redis.pcall('INCRBY', key, ARGV[3])
  if type(count) == 'table' then
    -- Not an integer, or another type: the wrong shape. Any other error (OOM on a full
    -- noeviction server, an overflow) is Redis' own, passed on.
    local e = count.err
    if not (string.find(e, '^WRONGTYPE') or string.find(e, 'not an integer')) then
      return count
    end
    fell = 'shape'
  else
    local cost = ARGV[3] + 0
    local left
    if count > cost then
      -- The TTL says when the counted window ends, and that the key has an expiry at all:
      -- a count without one was not written here.
      local ttl = redis.call('PTTL', key)
      if ttl >= 0 then left = ttl + 1 end
    elseif count == cost then
      -- The window's first hit (nothing here writes a count of 0): give the key its window,
      -- from Redis' TIME, in milliseconds (exact: below 2^52, a double's floor of a
      -- quotient of integers is the integer quotient). The same window as prelude.lua's
      -- `time` and `idiv` give in microseconds, floor(now / window).
      local t = redis.call('TIME')
      local now = t[1] * 1000 + math.floor(t[2] / 1000)
      local ms = ARGV[1] / 1000
      local stop = (math.floor(now / ms) + 1) * ms
      redis.call('PEXPIREAT', key, stop - 1)
      left = stop - now
    end
    if left then
      local capacity = ARGV[2] + 0
      if count > capacity then
        redis.call('DECRBY', key, ARGV[3])
        -- A count above the capacity (kept from a larger limit under the same key) is
        -- refused all the same; the reply only needs to say so, within 2 * capacity.
        if count > 2 * capacity then count = 2 * capacity end
      end
      local short = left * (2 * capacity + 1) + count
      if short < 9007199254740992 then return short end
      return {count, left}
    end
    -- No expiry, or a negative count before this call: take the cost back out.
    redis.call('DECRBY', key, ARGV[3])
    fell = 'shape'
  end
end
