-- Token bucket as GCRA, the same rules as `Gcra` in token_bucket.rs beside this file, in
-- microseconds: the theoretical arrival time (tat) of the next call decides; refunds also keep
-- the shift, how far refunds and rewards moved the arrival time back (see `Gcra::refund`).
--
-- KEYS[1]: the limiter key; holds the string "T<tat>", or, once something was given back,
--          "T<tat>:<shift>" and then "<first>:<last>:<time>" for each run of refunds it
--          remembers, all joined by ':' (see `Given` in token_bucket.rs); anything else there (another type or shape, a tat of 2^53 or more: Rust's
--          bound is past what a Lua number holds exactly, and no TIME a store decides at
--          comes near it; a shift past MAX_NOW) gets an error reply, see prelude.lua
-- ARGV[1]: emission interval (window / refill), in microseconds, at least 1
-- ARGV[2]: tolerance (interval * capacity), in microseconds
-- ARGV[3]: cost, from 1 to the capacity; 0 (with ARGV[4] = 0) looks at the level, see
--          `algorithm::level`
-- ARGV[4]: 1 to record an admitted call, 0 to only look (nothing is written)
-- Expiry: an absolute PXAT/PEXPIREAT rounded up to the millisecond, so the key never goes
--         before its state stops mattering, whatever instant Redis' expiry clock froze at.
-- ARGV[7]: in refund mode, the shift the spend's reply gave (see below)
-- Returns: {allowed (1 or 0), remaining, reset_at, retry_after (-1 when allowed), now}, and
--          the state's shift after them when it is not 0 (a spend's receipt carries it for a
--          refund); or the RATELIMIT_STATE error reply; times in microseconds since the
--          epoch, retry_after in microseconds, `now` Redis' TIME.
-- Time: safe by construction, as in Rust: tat = max(tat, TIME). After Redis' clock stepped
--       forward (and back), the tat it wrote lies ahead and calls wait for it; the step spent
--       at most the tokens it admitted, never refilled any.
-- The key expires at its tat, when the bucket is full again.

-- `key`, `cost`, `commit`, `time`, `idiv`, `unexpected`, `decimal` and MAX_EXACT come from
-- prelude.lua, loaded before this file.
local now = time(run_now)
local interval = ARGV[1] + 0
local tolerance = ARGV[2] + 0
local SHAPE = 'a token bucket ("T<tat>", or "T<tat>:<shift>" and its runs of refunds)'

local tat = now
local stored
-- Once something was given back (see `Given` in token_bucket.rs): the shift, and the runs of
-- refunds, each {its first place, its last place, the time given back}, lowest first.
local shift, runs = 0, {}
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then return unexpected(SHAPE) end -- WRONGTYPE
if raw then
  local t, rest = string.match(raw, '^T(%d+)(.*)$')
  stored = t and digits(t, MAX_EXACT)
  if stored and rest ~= '' then
    -- The shift, then three numbers for each run, each after a ':' in decimal's shape (no
    -- sign, no leading zero) and up to MAX_NOW, nothing else; runs as
    -- `Gcra::written_by_a_store` keeps them. The shape is looked at whole, once (a number at
    -- a time through `decimal` cost 26 us a call with 8 runs).
    local n, words = 0, {}
    if string.find(rest, '^[:%d]*%d$') and not string.find(rest, '::') and
        not string.find(rest, ':0%d') and string.byte(rest, 1) == 58 then
      for w in string.gmatch(rest, '%d+') do
        n = n + 1
        words[n] = w + 0
      end
    end
    if n == 0 or n % 3 ~= 1 or n > 25 or words[1] == 0 then stored = nil end
    for i = 1, n do
      if words[i] > MAX_NOW then stored = nil end
    end
    if stored then
      shift = words[1]
      for i = 2, n, 3 do
        local run = {words[i], words[i + 1], words[i + 2]}
        if run[1] >= run[2] or run[3] == 0 or (#runs > 0 and runs[#runs][2] >= run[1]) then
          stored = nil
        end
        runs[#runs + 1] = run
      end
    end
  end
  if not stored then return unexpected(SHAPE) end
  tat = math.max(stored, now)
end

-- Writes the arrival time `t` (and what refunds keep), expiring when the bucket is full again.
local function write(t)
  local value = string.format('T%d', t)
  if shift > 0 then
    local parts = {value, string.format('%d', shift)}
    for _, r in ipairs(runs) do
      parts[#parts + 1] = string.format('%d:%d:%d', r[1], r[2], r[3])
    end
    value = table.concat(parts, ':')
  end
  redis.call('SET', key, value, 'PXAT', idiv(t + 999, 1000))
end

-- Runs i and i + 1 as one, from the first's first place.
local function merge(i)
  local next = table.remove(runs, i + 1)
  runs[i][2] = next[2]
  runs[i][3] = runs[i][3] + next[3]
end

-- Adds `moved` to the shift (false when it would pass MAX_NOW), and remembers the refund of the
-- spend that took the places `places` ({first, last}, when given), as `Given::remember`.
local function move_back(moved, places)
  if shift + moved > MAX_NOW then return false end
  if moved == 0 then return true end
  shift = shift + moved
  if places then
    local at = #runs + 1
    for i, r in ipairs(runs) do
      if r[1] > places[1] then at = i break end
    end
    table.insert(runs, at, {places[1], places[2], moved})
    local i = 1
    while i < #runs do
      if runs[i][2] == runs[i + 1][1] then merge(i) else i = i + 1 end
    end
    while #runs > 8 do merge(1) end
  end
  return true
end

if refunding then
  -- What the spend still holds (`end - at`, at most its cost's time), at an instant never
  -- before the bucket's last admitted call as the state tells it (tat less the tolerance).
  -- Its end is its reset_at moved back by the shift since it was made (ARGV[7], the shift
  -- its reply gave), less the runs of refunds from its place on, as `Gcra::refund`.
  if not stored then return 0 end
  local at = math.max(now, stored - tolerance)
  local was = ARGV[7] + 0
  local cost_time = interval * cost
  local place = spent + was
  local from = place - cost_time
  if place > MAX_NOW or cost == 0 or from < 0 then return 0 end
  local after = 0
  for _, r in ipairs(runs) do
    if r[1] >= place then after = after + r[3] end
    if r[1] < place and r[2] > from then return 0 end -- places already given back
  end
  local moved = shift - was - after
  if shift - was < 0 or moved < 0 then return 0 end
  local ends = spent - moved
  if at >= ends or stored <= at or ends > stored then return 0 end
  local back_to = math.max(stored - math.min(cost_time, ends - at), at)
  -- The last spend (its place is the arrival time's, shifted) moves no other spend back.
  if place ~= stored + shift and not move_back(stored - back_to, {from, place}) then return 0 end
  if giving then write(back_to) end
  return 1
end

if adjusting then
  -- A penalty moves the arrival time on by its tokens (at most 2^51 microseconds past TIME,
  -- the largest tolerance a script counts exactly; Rust's bound is 2^62 nanoseconds), a
  -- reward moves it back (never before TIME: a full bucket), as `Gcra::adjust`.
  -- A reward moves every spend back with it: the shift grows by the time it moved, of no
  -- spend in particular (a reward whose shift would pass MAX_NOW gives nothing).
  local moved = interval * cost
  local back_to = math.max(tat - moved, now)
  if penalty then back_to = math.max(math.min(tat + moved, now + 2251799813685248), tat) end
  local units = idiv(math.abs(back_to - tat), interval)
  if not penalty and units > 0 and not move_back(tat - back_to, nil) then return 0 end
  if back_to ~= tat and (penalty or units > 0) then write(back_to) end
  return units
end

local new_tat = tat + interval * cost
local horizon = now + tolerance
local shifted = shift > 0 and shift or nil
if new_tat <= horizon then
  if commit then write(new_tat) end
  return {1, idiv(horizon - new_tat, interval), new_tat, -1, now, shifted}
end
return {0, idiv(math.max(horizon - tat, 0), interval), tat, new_tat - horizon, now, shifted}
