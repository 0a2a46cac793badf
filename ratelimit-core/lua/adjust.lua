-- A penalty or a reward on one key (the strategy's script in its adjust mode, see
-- lua/prelude.lua), with the key's stamp kept no longer than its state: a reward may move the
-- state's expiry earlier (see stamp_follows in lua/beside.lua). The strategies' scripts are
-- loaded in front of this file as functions, with `scripts`, as for lua/refund.lua.
--
-- KEYS[1]: the limiter key; KEYS[2]: its stamp key (see lua/stacked.lua); KEYS[3]: its
--          erased key: a reward of a token bucket carried from another Cluster slot adds
--          what it gave back to it (`erase_given` in lua/beside.lua; nothing without it)
-- ARGV[1]: the strategy (its place in `scripts`); ARGV[2], ARGV[3]: the two numbers its script
--          takes as ARGV[1] and ARGV[2]; ARGV[4]: the units; ARGV[5]: 4 a penalty, 5 a reward;
--          ARGV[6]: 1 when a reward leaves no spend before it to give back (the strategy
--          counts units and cannot tell a spend's from the reward's afterwards, see
--          `Algorithm::REFUNDS_SURVIVE_REWARDS`): such a reward deletes the stamp, so the next
--          spend kept draws a new one
-- Returns: the units spent or given back, or the error reply of state of an unexpected shape.

local rewards = ARGV[5] == '5'
local erased, before, now
if rewards then
  erased = erased_of(KEYS[3])
  if type(erased) == 'table' then return erased end
  if erased then
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
    before = bucket_end(KEYS[1], now)
  end
end
local units = scripts[ARGV[1] + 0]({KEYS[1]}, {ARGV[2], ARGV[3], ARGV[4], ARGV[5], '1'})
if type(units) == 'table' then return units end
if erased then erase_given(KEYS[1], KEYS[3], erased, before, now) end
if ARGV[5] == '5' and ARGV[6] == '1' and units > 0 then
  redis.call('DEL', KEYS[2])
else
  stamp_follows(KEYS[1], KEYS[2])
end
return units
