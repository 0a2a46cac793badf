-- Token bucket as GCRA, the same rules as `Gcra::decide` in token_bucket.rs beside this file, in
-- microseconds: the theoretical arrival time (tat) of the next call is the only state.
--
-- KEYS[1]: the limiter key; holds the string "T<tat>"; anything else there (another type or
--          shape, a tat of 2^53 or more: Rust's bound is past what a Lua number holds
--          exactly, and no TIME a store decides at comes near it) gets an error reply, see
--          prelude.lua
-- ARGV[1]: emission interval (window / refill), in microseconds, at least 1
-- ARGV[2]: tolerance (interval * capacity), in microseconds
-- ARGV[3]: cost, from 1 to the capacity; 0 (with ARGV[4] = 0) looks at the level, see
--          `algorithm::level`
-- ARGV[4]: 1 to record an admitted call, 0 to only look (nothing is written)
-- Expiry: an absolute PXAT/PEXPIREAT rounded up to the millisecond, so the key never goes
--         before its state stops mattering, whatever instant Redis' expiry clock froze at.
-- Returns: {allowed (1 or 0), remaining, reset_at, retry_after (-1 when allowed), now}, or the
--          RATELIMIT_STATE error reply; times in microseconds since the epoch, retry_after
--          in microseconds, `now` Redis' TIME.
-- Time: safe by construction, as in Rust: tat = max(tat, TIME). After Redis' clock stepped
--       forward (and back), the tat it wrote lies ahead and calls wait for it; the step spent
--       at most the tokens it admitted, never refilled any.
-- The key expires at its tat, when the bucket is full again.

-- `key`, `cost`, `commit`, `time`, `idiv`, `unexpected`, `decimal` and MAX_EXACT come from
-- prelude.lua, loaded before this file.
local now = time()
local interval = ARGV[1] + 0
local tolerance = ARGV[2] + 0
local SHAPE = 'a token bucket ("T<tat>")'

local tat = now
local stored
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then return unexpected(SHAPE) end -- WRONGTYPE
if raw then
  stored = string.match(raw, '^T(%d+)$')
  stored = stored and decimal(stored, MAX_EXACT)
  if not stored then return unexpected(SHAPE) end
  tat = math.max(stored, now)
end

if refunding then
  -- What the spend still holds (`spent - at`, at most its cost's time), at an instant never
  -- before the bucket's last admitted call as the state tells it (tat less the tolerance).
  if not stored then return 0 end
  local at = math.max(now, stored - tolerance)
  if at >= spent or stored <= at or cost == 0 then return 0 end
  local back_to = math.max(stored - math.min(interval * cost, spent - at), at)
  if giving then
    redis.call('SET', key, string.format('T%d', back_to), 'PXAT', idiv(back_to + 999, 1000))
  end
  return 1
end

if adjusting then
  -- A penalty moves the arrival time on by its tokens (at most 2^51 microseconds past TIME,
  -- the largest tolerance a script counts exactly; Rust's bound is 2^62 nanoseconds), a
  -- reward moves it back (never before TIME: a full bucket), as `Gcra::adjust`.
  local moved = interval * cost
  local back_to = math.max(tat - moved, now)
  if penalty then back_to = math.max(math.min(tat + moved, now + 2251799813685248), tat) end
  local units = idiv(math.abs(back_to - tat), interval)
  if back_to ~= tat and (penalty or units > 0) then
    redis.call('SET', key, string.format('T%d', back_to), 'PXAT', idiv(back_to + 999, 1000))
  end
  return units
end

local new_tat = tat + interval * cost
local horizon = now + tolerance
if new_tat <= horizon then
  if commit then
    redis.call('SET', key, string.format('T%d', new_tat), 'PXAT', idiv(new_tat + 999, 1000))
  end
  return {1, idiv(horizon - new_tat, interval), new_tat, -1, now}
end
return {0, idiv(math.max(horizon - tat, 0), interval), tat, new_tat - horizon, now}
