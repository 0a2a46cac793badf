-- Sliding window counter, the same rules as `SlidingCounter::decide` in src/algorithm.rs, in
-- microseconds: the estimate is previous * (window - elapsed) / window + current, compared
-- in exact integer arithmetic (the caller keeps capacity * window below 2^51).
--
-- KEYS[1]: the limiter key; a hash from window numbers (window start / window, in decimal)
--          to the positive integer count of that window: the recorded window (the largest
--          number) and at most the one before it. A call in the recorded window reads three
--          fields (HMGET: the one before, its own, and the one after, absent) and increments
--          one (HINCRBY); any other call (the first of a window, or one behind the recorded
--          window) reads them all (at most three), and the first of a window drops the ones
--          that no longer count and sets the expiry.
--          Anything else there (another type, the string "C<start>:<window>:<previous>:
--          <current>" of earlier versions among them, or a field or count that is not a
--          decimal number) gets an error reply, see prelude.lua.
-- ARGV[1]: window, in microseconds
-- ARGV[2]: capacity (limit + burst), at least 1
-- ARGV[3]: cost, from 1 to the capacity; 0 (with ARGV[4] = 0) looks at the level, see
--          `algorithm::level`
-- ARGV[4]: 1 to record an admitted call, 0 to only look (nothing is written)
-- ARGV[5]: 1 for the full reply below whatever the call; otherwise a call that records, under
--          a window of 10 ms or more, gets the short reply when admitted in the window of TIME.
-- Expiry: an absolute PEXPIREAT rounded up to the millisecond, two windows after the start of
--         the recorded window (when its count stops mattering), set by the window's first call,
--         so the key never goes before its state stops mattering, whatever instant Redis'
--         expiry clock froze at.
-- Returns: the full reply {allowed (1 or 0), remaining, reset_at, retry_after (-1 when
--          allowed), now}, times in microseconds since the epoch, retry_after in microseconds,
--          `now` Redis' TIME; or the short reply, one integer `(number mod 1024) * (capacity +
--          1) + remaining` for a call admitted and recorded in the window of that number (so
--          full again two windows after its start). Or the RATELIMIT_STATE error reply.
-- Time: never decided before the recorded window (now = max(TIME, recorded start)), as in
--       Rust. After Redis' clock stepped forward (and back, or on a failover to a server whose
--       clock is behind), the key holds a window that has not begun: calls are counted in that
--       window until the clock reaches it (its previous count still weighing as at its start),
--       never in an earlier one that would start from 0, so no window is counted twice. The
--       fields are the recorded window's and the one before, so a window whose field exists
--       and whose next window's does not is the recorded one. retry_after is measured from
--       TIME (the same as Rust's whenever TIME has not gone back), so a refused caller is told
--       how long it really waits.

-- `key`, `cost`, `commit`, `time`, `idiv` and `unexpected` come from prelude.lua.
local now = time()
local window = ARGV[1] + 0
local capacity = ARGV[2] + 0
local SHAPE = 'a sliding window counter (a hash of window numbers to counts)'
local COUNT = '^[1-9]%d*$' -- what a count this script wrote looks like

local at = now
local n = idiv(now, window) -- the number of the window decided in
local previous, current = 0, 0
-- Set by the first call of a window: the fields to drop (they no longer count).
local first, stale
-- Arguments to redis.call are strings where they can be: Redis prints a number argument with
-- "%.17g", which costs more than the command itself on this path.
local field = string.format('%d', n)
local fields = redis.pcall('HMGET', key, string.format('%d', n - 1), field,
  string.format('%d', n + 1))
if fields.err then return unexpected(SHAPE) end -- WRONGTYPE
local c = fields[2]
if c and not fields[3] then
  if not string.find(c, COUNT) then return unexpected(SHAPE) end
  current = c + 0
  local p = fields[1]
  if p then
    if not string.find(p, COUNT) then return unexpected(SHAPE) end
    previous = p + 0
  end
else
  -- The window's first call, or TIME behind the recorded window: read every field, and
  -- decide in the recorded window if it is ahead of TIME's.
  stale = {}
  local all = redis.call('HGETALL', key)
  local counts = {}
  local recorded = -1
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if not string.find(v, COUNT) or not string.find(f, '^%d+$') then
      return unexpected(SHAPE)
    end
    f = f + 0
    counts[f] = v + 0
    if f > recorded then recorded = f end
  end
  if recorded > n then
    n = recorded
    field = string.format('%d', n)
    at = n * window
  end
  current = counts[n] or 0
  first = current == 0
  previous = counts[n - 1] or 0
  for i = 1, #all, 2 do
    local f = all[i] + 0
    if f ~= n and f ~= n - 1 then stale[#stale + 1] = all[i] end
  end
end
local start = n * window
local elapsed = at - start

-- All in "calls x window" units, so nothing is rounded.
local used_w = previous * (window - elapsed) + current * window
local budget_w = capacity * window
if used_w + cost * window <= budget_w then
  local remaining = idiv(budget_w - used_w - cost * window, window)
  if commit then
    -- HINCRBY first: Redis checks maxmemory before a script's first write only, and a full
    -- noeviction server must refuse this one.
    redis.call('HINCRBY', key, field, ARGV[3])
    if first then
      if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
      redis.call('PEXPIREAT', key, idiv(start + 2 * window + 999, 1000))
    end
    if at == now and window >= 10000 and ARGV[5] ~= '1' then
      return (n % 1024) * (capacity + 1) + remaining
    end
  end
  -- Current is above 0 once the call is counted, unless it is a look (cost 0).
  local reset_at = start + 2 * window
  if current + cost == 0 then reset_at = previous > 0 and start + window or at end
  return {1, remaining, reset_at, -1, now}
end

local retry_at
if current + cost <= capacity then
  -- Wait in this window until the previous window's weight has shrunk enough.
  retry_at = start + window - idiv((capacity - current - cost) * window, previous)
else
  -- Wait into the next window, where this window's count becomes the previous one.
  retry_at = start + 2 * window - math.min(idiv((capacity - cost) * window, current), window)
end
local reset_at = start + 2 * window
if current == 0 then reset_at = previous > 0 and start + window or at end
return {0, idiv(math.max(budget_w - used_w, 0), window), reset_at, retry_at - now, now}
