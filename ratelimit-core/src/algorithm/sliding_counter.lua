-- Sliding window counter, the same rules as `SlidingCounter::decide` in sliding_counter.rs (beside
-- this file), in
-- microseconds: the estimate is previous * (window - elapsed) / window + current, compared
-- in exact integer arithmetic (the caller keeps capacity * window below 2^51).
--
-- KEYS[1]: the limiter key; a hash from window numbers (window start / window, in decimal)
--          to the integer count of that window: the recorded window (the largest number, a
--          positive count) and the one before it (a count of 0 when that window had none;
--          absent in the state of earlier versions). Only these two are kept, so a call that
--          finds both its window's field and the one before is in the recorded window: it
--          reads two fields (HMGET) and increments one (HINCRBY). Any other call (the first of
--          a window, or one behind the recorded window) reads them all (at most three), and
--          the first of a window drops the ones that no longer count, writes the one before
--          (0) when absent and sets the expiry.
--          Anything else there (another type, the string "C<start>:<window>:<previous>:
--          <current>" of earlier versions among them, a field or count that is not a
--          decimal number as written here, a window starting past MAX_NOW, a count above
--          MAX_CAPACITY or whose product with the window is above 2^51, which no quota of
--          this window counts to (see `supports`), or a field other than those two) gets an
--          error reply, see prelude.lua. A key expiring other than when its recorded window
--          stops counting is another window's: refused until it ends, see `ours` below.
-- ARGV[1]: window, in microseconds
-- ARGV[2]: capacity (limit + burst), at least 1
-- ARGV[3]: cost, from 1 to the capacity; 0 (with ARGV[4] = 0) looks at the level, see
--          `algorithm::level`
-- ARGV[4]: 1 to record an admitted call, 0 to only look (nothing is written)
-- ARGV[5]: its first bit 1 for the full reply below whatever the call; otherwise a call that
--          records, under a window of 10 ms or more, gets the short reply when admitted in the
--          window of TIME. Its second bit: a key of one window (see prelude.lua).
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
local now = time(run_now)
local window = ARGV[1] + 0
local capacity = ARGV[2] + 0
local SHAPE = 'a sliding window counter (a hash of window numbers to counts)'
-- The largest count and window number any quota of this window writes.
local MOST = math.min(MAX_CAPACITY, idiv(2251799813685248, window))
local LAST = idiv(MAX_NOW, window)

-- Every field, read and checked: the counts by window number, the recorded (largest) window's
-- number (-1: none) and the fields as read; or the error reply for a hash of another shape.
local function read_all()
  local all = redis.pcall('HGETALL', key)
  if all.err then return unexpected(SHAPE) end -- WRONGTYPE
  local counts, recorded = {}, -1
  for i = 1, #all, 2 do
    local f, v = decimal(all[i], LAST), decimal(all[i + 1], MOST)
    if not (f and v) then return unexpected(SHAPE) end
    counts[f] = v
    if f > recorded then recorded = f end
  end
  -- The recorded window's count is positive; the only other field is the one before it.
  for f in pairs(counts) do
    if f == recorded and counts[f] == 0 or f ~= recorded and f ~= recorded - 1 then
      return unexpected(SHAPE)
    end
  end
  return counts, recorded, all
end

-- Whether the key expires when a state recorded in window `r` stops counting (two windows
-- after its start, rounded up to the millisecond), as every expiry this window writes does;
-- and the key's absolute expiry in milliseconds (-1: none). A state that expires elsewhere
-- was written under another window (a bare store key asked under two quotas): its window
-- numbers are not this window's, and read as this window's they were an old window's, a
-- fresh budget (a one-second quota dropped a day's count of 10, and the day's limit came
-- back). Such a state is refused until it ends, as the memory store's `algorithm::foreign`,
-- and left as it is. Read for a bare key only (ARGV[5], prelude.lua), where a call reads every
-- field (the first call of a window); the call that finds both its fields (HMGET) reads no
-- expiry.
-- An expiry up to an eighth of the window (50 ms at most) later is still this window's: a
-- MIGRATE (a Cluster resharding) or RESTORE gives the key a relative TTL, later by the time
-- it took.
local function ours(r)
  local want = idiv((r + 2) * window + 999, 1000)
  local at = redis.pcall('PEXPIRETIME', key)
  if type(at) == 'table' then
    -- Redis 6.2 has no PEXPIRETIME: TIME read before PTTL, it may be a millisecond early.
    local ttl = redis.call('PTTL', key)
    if ttl < 0 then return false, ttl end
    at = idiv(time(run_now), 1000) + ttl + 1
  end
  return at >= want and at - want <= math.min(50, idiv(window, 8000)), at
end

if refunding then
  -- The count of the spend's window (which starts two windows before `spent`) while it is
  -- the recorded window and the current one; a window emptied steps back to the one before
  -- (the key goes when that one had no count), as `SlidingCounter::refund` does.
  local r = idiv(spent, window) - 2
  if spent % window ~= 0 or cost == 0 or now >= (r + 1) * window then return 0 end
  local f = string.format('%d', r)
  local counts, recorded = read_all()
  if not recorded then return counts end
  if recorded ~= r then return 0 end -- another window is recorded, or none
  local c, p = counts[r], counts[r - 1] or 0
  if c < cost then return 0 end
  if giving then
    if c > cost then
      redis.call('HINCRBY', key, f, string.format('%d', -cost))
    elseif p == 0 then
      redis.call('DEL', key)
    else
      redis.call('HDEL', key, f)
      redis.call('HSET', key, string.format('%d', r - 2), '0')
      redis.call('PEXPIREAT', key, string.format('%d', idiv((r + 1) * window + 999, 1000)))
    end
  end
  return 1
end

if adjusting then
  -- `SlidingCounter::adjust`: in the window of TIME, never before the recorded one, a penalty
  -- adds to its count (up to MOST, the largest count this window's scripts read back;
  -- Rust's bound is MAX_CAPACITY), a reward takes from it (the previous window's weight
  -- stays); a window left with no count steps back to the previous one, as a refund's does.
  local counts, recorded = read_all()
  if not recorded then return counts end
  -- Another window's state (see `ours`): nothing of this window's to give back, and no
  -- window of this one's to keep a penalty in without dropping the other's count.
  if recorded >= 0 and not ours(recorded) then
    if penalty then return unexpected(SHAPE) end
    return 0
  end
  local n = math.max(idiv(now, window), recorded)
  local previous, current = counts[n - 1] or 0, counts[n] or 0
  local next_count = current - math.min(cost, current)
  if penalty then next_count = math.min(current + cost, MOST) end
  if next_count ~= current then
    redis.call('DEL', key)
    local r, c, p = n, next_count, previous
    if next_count == 0 then r, c, p = n - 1, previous, 0 end
    if c > 0 then
      redis.call('HSET', key, string.format('%d', r), string.format('%d', c))
      redis.call('HSET', key, string.format('%d', r - 1), string.format('%d', p))
      redis.call('PEXPIREAT', key, string.format('%d', idiv((r + 2) * window + 999, 1000)))
    end
  end
  return math.abs(next_count - current)
end

local at = now
local n = idiv(now, window) -- the number of the window decided in
local previous, current = 0, 0
-- Set by the first call of a window: the fields to drop (they no longer count).
local first, stale
-- Set when the window before the one decided in has no field: an admitted call writes 0.
local missing
-- Arguments to redis.call are strings where they can be: Redis prints a number argument with
-- "%.17g", which costs more than the command itself on this path.
local field = string.format('%d', n)
local before = string.format('%d', n - 1)
local fields = redis.pcall('HMGET', key, before, field)
if fields.err then return unexpected(SHAPE) end -- WRONGTYPE
local p, c = fields[1], fields[2]
if p and c then
  current, previous = decimal(c, MOST), decimal(p, MOST)
  -- The recorded window's count is positive; the one before may be 0.
  if not (current and previous) or current == 0 then return unexpected(SHAPE) end
else
  -- The window's first call, or TIME behind the recorded window: read every field, and
  -- decide in the recorded window if it is ahead of TIME's.
  stale = {}
  local counts, recorded, all = read_all()
  if not recorded then return counts end
  if recorded >= 0 and not one_window then
    local own, at = ours(recorded)
    if not own then
      if at < 0 then return unexpected(SHAPE) end -- a count without an expiry
      local ends = (at + 1) * 1000
      return {0, 0, ends, math.max(ends - now, 1), now}
    end
  end
  if recorded > n then
    n = recorded
    field = string.format('%d', n)
    before = string.format('%d', n - 1)
    at = n * window
  end
  current = counts[n] or 0
  first = current == 0
  previous = counts[n - 1] or 0
  -- So that the next call in this window finds both fields.
  missing = counts[n - 1] == nil
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
    if missing then redis.call('HSET', key, before, '0') end
    if first then
      if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
      redis.call('PEXPIREAT', key, idiv(start + 2 * window + 999, 1000))
    end
    if at == now and window >= 10000 and short then
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
