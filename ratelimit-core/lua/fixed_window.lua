-- Fixed window, the same rules as `FixedWindow::decide` in src/algorithm.rs, in microseconds.
-- Windows are aligned to multiples of the window since the epoch; time is Redis' own (TIME),
-- so every client agrees on the boundaries whatever its local clock says.
--
-- KEYS[1]: the limiter key; holds the string "F<window start>:<window>:<count>"; anything else
--          there (another type or shape) gets an error reply, see prelude.lua
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
--       window until the clock reaches it, never in an earlier one that would start from 0, so
--       the step moves the key's window ahead and no window is counted twice. retry_after is
--       measured from TIME (the same as Rust's whenever TIME has not gone back), so a refused
--       caller is told how long it really waits.
-- The key expires when its window ends: no counter outlives its window.

-- `key`, `cost`, `commit`, `now` and `idiv` come from prelude.lua, loaded before this file.
local window = ARGV[1] + 0
local capacity = ARGV[2] + 0
local SHAPE = 'a fixed window ("F<start>:<window>:<count>")'

local at = now
local start
local count = 0
-- The prefix of the stored value when it was written for this very window (and so already
-- expires at its end): then the count is rewritten and the expiry kept, the cheap path.
local same
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then return unexpected(SHAPE) end -- WRONGTYPE
if raw then
  local head, s, w, c = string.match(raw, '^(F(%d+):(%d+):)(%d+)$')
  if not s then return unexpected(SHAPE) end
  s = s + 0
  if s > at then at = s end
  start = idiv(at, window) * window
  if s == start then
    count = c + 0
    if w + 0 == window then same = head end
  end
else
  start = idiv(at, window) * window
end
local stop = start + window

if count + cost <= capacity then
  if commit then
    if same then
      redis.call('SET', key, same .. (count + cost), 'KEEPTTL')
    else
      local value = string.format('F%d:%d:%d', start, window, count + cost)
      redis.call('SET', key, value, 'PXAT', idiv(stop + 999, 1000))
    end
  end
  -- A look (cost 0) at an unused window: full now, as in Rust.
  local reset_at = stop
  if count + cost == 0 then reset_at = at end
  return {1, capacity - count - cost, reset_at, -1, now}
end
return {0, math.max(capacity - count, 0), stop, stop - now, now}
