-- What a state a reload moved a limit away from holds for the moved limit's state, read in
-- the old state's own Redis Cluster slot, for a moved state in another (a budget without a
-- user key: each key hashed whole), which no one script can read beside it
-- (src/store/redis/stacked.rs, `across_slots`). lua/stacked.lua then carries it in as the
-- times read here (its `given` carries, see lua/carry.lua). Loaded behind lua/carry.lua (and
-- what is in front of it).
--
-- KEYS[1], KEYS[2], KEYS[3]: the old state's key, its block key and the time resets erased
--             from its bucket while it is carried (its erased key, see below).
-- ARGV[1..4]: its quota's strategy, the two numbers its script takes, and its block in
--             microseconds, as lua/stacked.lua takes a carried state's; the block 0 when
--             the moved state's quota has none (no block is read then, as `carry` reads none).
-- ARGV[5]: 1 when its token bucket's debt is carried (`Carry::carries_debt`), else 0.
-- ARGV[6]: how long after the debt read what the call writes from this read beside the
--          moved state is kept (its pending record, a mark: lua/carry.lua), microseconds.
-- Returns: {debt, block, now, erased}: the first two in microseconds from this script's TIME,
--          `now`: the time until the old bucket is full again (0: full, or no debt read), and
--          what is left of its block (0: none); then the time resets erased from the bucket
--          while it was carried (0: none, or no debt read), which nothing carries; or the
--          error reply a state of an unexpected shape gives (the erased key's too). With
--          `now`, read again after the stacked script, they tell whether the old state was
--          written between (its end later than time alone explains, or erased: see
--          `Read::grown_since` in src/store/redis/stacked.rs).
--
-- The erased key: what an old state's end grew by between two reads (a spend's, added to the
-- moved state: `grow` in lua/carry.lua) is told by its end, which a reset by a pod the reload
-- has not reached moves back (lua/reset.lua), and so do a reward, a refund and a lease's
-- units given back: read full after it, the spends between a pending record's read and the
-- reset were lost (9 admitted after where one server leaves 4:
-- `probe_a_standing_record_then_the_old_state_reset`, carries/). So each read of a debt
-- carried keeps the key, the time resets and give-backs erased (0 at first), for as long as
-- what it reads may be compared with a later read (ARGV[6] after its debt); a reset or a
-- give-back adds to it what it erased while it is kept (never for a key nothing carries:
-- lua/reset.lua, `erase_given` in lua/beside.lua); the end a read tells, its end plus that
-- time (`Read::end`), never moves back. What a spend and its give-back, both after a call's
-- script, then read as growth is owed only past the moved bucket's slack (`tickets` in
-- lua/carry.lua).

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
  local c = erased_of(KEYS[3])
  if type(c) == 'table' then return c end
  erased = c or 0
  -- The end the read tells (`Read::end`) is carried as a Lua number, exact below 2^53 only:
  -- an erased key holding more than any end may (garbage: no reset reaches it) had a read
  -- a microsecond past its wait carried (`late` in lua/carry.lua) and a record no script
  -- reads (`probe94_the_erased_key_at_its_bound_is_unexpected_state`, lua_carry/).
  if now + debt + erased > 9007199254740991 then
    return redis.error_reply('RATELIMIT_STATE the erased key holds more time than an end may')
  end
  local until_ms = math.floor((now + debt + ARGV[6]) / 1000) + 1
  if expiry(KEYS[3]) < until_ms then
    redis.call('SET', KEYS[3], string.format('%d', erased), 'PXAT', string.format('%d', until_ms))
  end
end
return {debt, left, now, erased}
