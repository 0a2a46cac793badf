-- What a state a reload moved a limit away from holds for the moved limit's state, read in
-- the old state's own Redis Cluster slot, for a moved state in another (a budget without a
-- user key: each key hashed whole), which no one script can read beside it
-- (src/store/redis/stacked.rs, `across_slots`). lua/stacked.lua then carries it in as the
-- times read here (its `given` carries, see lua/carry.lua). Loaded behind lua/carry.lua (and
-- what is in front of it).
--
-- KEYS[1], KEYS[2], KEYS[3]: the old state's key, its block key and its erased end (the end
--             a reset erased, lua/reset.lua).
-- ARGV[1..4]: its quota's strategy, the two numbers its script takes, and its block in
--             microseconds, as lua/stacked.lua takes a carried state's; the block 0 when
--             the moved state's quota has none (no block is read then, as `carry` reads none).
-- ARGV[5]: 1 when its token bucket's debt is carried (`Carry::carries_debt`), else 0.
-- Returns: {debt, block, now, erased}: the first two in microseconds from this script's TIME,
--          `now`: the time until the old bucket is full again (0: full, or no debt read), and
--          what is left of its block (0: none); then the end a reset erased while it is
--          later than `now` (0: none, or no debt read), which nothing carries: the end the
--          old state was spent to before the reset, for what its end grew by (`grow` in
--          lua/carry.lua); or the error reply a state of an unexpected shape gives (an erased
--          end too). With `now`, read again after the stacked script, they tell whether the
--          old state was written between (its end later than time alone explains: see
--          `Read::grown_since` in src/store/redis/stacked.rs).

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local old = {key = KEYS[1], block_key = KEYS[2], strategy = ARGV[1], first = ARGV[2],
  second = ARGV[3], block = ARGV[4]}

local debt, left, erased = 0, 0, 0
if old.block + 0 > 0 then
  local until_us = beside_number(old.block_key, 'block')
  if type(until_us) == 'table' then return until_us end
  if until_us and until_us + 0 > now then left = until_us + 0 - now end
end
if ARGV[5] == '1' then
  local from = level(old, now)
  if from.err then return from end
  debt = math.max(from[3] - from[5], 0)
  local until_us = beside_number(KEYS[3], 'erased end')
  if type(until_us) == 'table' then return until_us end
  if until_us and until_us + 0 > now then erased = until_us + 0 end
end
return {debt, left, now, erased}
