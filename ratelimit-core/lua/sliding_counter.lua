-- Sliding window counter, the same rules as `SlidingCounter::decide` in src/algorithm.rs, in
-- microseconds: the estimate is previous * (window - elapsed) / window + current, compared
-- in exact integer arithmetic (the caller keeps capacity * window below 2^51).
--
-- KEYS[1]: the limiter key; holds the string "C<window start>:<window>:<previous>:<current>";
--          anything else there (another type or shape) gets an error reply, see prelude.lua
-- ARGV[1]: window, in microseconds
-- ARGV[2]: capacity (limit + burst), at least 1
-- ARGV[3]: cost, from 1 to the capacity; 0 (with ARGV[4] = 0) looks at the level, see
--          `algorithm::level`
-- ARGV[4]: 1 to record an admitted call, 0 to only look (nothing is written)
-- Expiry: an absolute PXAT/PEXPIREAT rounded up to the millisecond, so the key never goes
--         before its state stops mattering, whatever instant Redis' expiry clock froze at.
-- Returns: {allowed (1 or 0), remaining, reset_at, retry_after (-1 when allowed), now}, or the
--          RATELIMIT_STATE error reply; times in microseconds since the epoch, retry_after
--          in microseconds, `now` Redis' TIME.
-- Time: never decided before the recorded window (now = max(TIME, recorded start)), as in
--       Rust. After Redis' clock stepped forward (and back, or on a failover to a server whose
--       clock is behind), the key holds a window that has not begun: calls are counted in that
--       window until the clock reaches it (its previous count still weighing as at its start),
--       never in an earlier one that would start from 0, so no window is counted twice.
--       retry_after is measured from TIME (the same as Rust's whenever TIME has not gone
--       back), so a refused caller is told how long it really waits.
-- The key expires when its counts stop mattering: two windows after the current one began.

-- `key`, `cost`, `commit`, `time` and `idiv` come from prelude.lua, loaded before this file.
local now = time()
local window = ARGV[1] + 0
local capacity = ARGV[2] + 0
local SHAPE = 'a sliding window counter ("C<start>:<window>:<previous>:<current>")'

local at = now
local start
local previous, current = 0, 0
-- The prefix of the stored value when it was written in this very window (and so already
-- expires when its counts stop mattering): then the expiry is kept, the cheap path.
local same
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then return unexpected(SHAPE) end -- WRONGTYPE
if raw then
  local head, s, w, p, c = string.match(raw, '^(C(%d+):(%d+):(%d+):)(%d+)$')
  if not s then return unexpected(SHAPE) end
  s = s + 0
  if s > at then at = s end
  start = idiv(at, window) * window
  if s == start then
    previous, current = p + 0, c + 0
    if w + 0 == window then same = head end
  elseif s + window == start then
    previous = c + 0
  end
else
  start = idiv(at, window) * window
end
local elapsed = at - start

local function reset_at(p, c)
  if c > 0 then return start + 2 * window end
  if p > 0 then return start + window end
  return at
end

-- All in "calls x window" units, so nothing is rounded.
local used_w = previous * (window - elapsed) + current * window
local budget_w = capacity * window
if used_w + cost * window <= budget_w then
  if commit then
    if same then
      redis.call('SET', key, same .. (current + cost), 'KEEPTTL')
    else
      local value = string.format('C%d:%d:%d:%d', start, window, previous, current + cost)
      redis.call('SET', key, value, 'PXAT', idiv(start + 2 * window + 999, 1000))
    end
  end
  return {1, idiv(budget_w - used_w - cost * window, window), reset_at(previous, current + cost), -1, now}
end

local retry_at
if current + cost <= capacity then
  -- Wait in this window until the previous window's weight has shrunk enough.
  retry_at = start + window - idiv((capacity - current - cost) * window, previous)
else
  -- Wait into the next window, where this window's count becomes the previous one.
  retry_at = start + 2 * window - math.min(idiv((capacity - cost) * window, current), window)
end
return {0, idiv(math.max(budget_w - used_w, 0), window), reset_at(previous, current), retry_at - now, now}
