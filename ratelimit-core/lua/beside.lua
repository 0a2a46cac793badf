-- What the scripts of several keys (lua/stacked.lua, lua/refund.lua) read beside a state:
-- its stamp or its block, each a key of its own in the state's slot holding one number.
--
-- Defines: beside_number(k, what): the number key `k` holds as the scripts write it (decimal
--          digits, no sign, no leading zero, below 2^53; nil: no key), or the RATELIMIT_STATE
--          error reply naming `what` for anything else there;
--          expiry(k): the absolute expiry of `k` in milliseconds (-1: none, -2: no key);
--          stamp_follows(state, stamp): see below;
--          erased_of(k): the time resets and give-backs erased from a carried token bucket,
--          beside it (see lua/level.lua): a number (decimal digits, no sign, no leading zero
--          but "0", below 2^53), nil without the key, or the RATELIMIT_STATE error reply for
--          anything else;
--          bucket_end(k, now), erase_given(k, before, now): see below.

local function beside_number(k, what)
  local s = redis.pcall('GET', k)
  if type(s) == 'table' then
    return redis.error_reply('RATELIMIT_STATE the ' .. what .. ' key holds a '
      .. redis.call('TYPE', k)['ok'] .. ' that is not a ' .. what)
  end
  if not s then return nil end -- no key: GET's nil reply is false in Lua
  if not string.find(s, '^[1-9]%d*$') or s + 0 > 9007199254740991 then
    return redis.error_reply('RATELIMIT_STATE the ' .. what .. ' key holds a string that is not a '
      .. what)
  end
  return s
end

local function erased_of(k)
  local s = redis.pcall('GET', k)
  if not s then return nil end
  if type(s) == 'table' or not (string.find(s, '^[1-9]%d*$') or s == '0')
      or s + 0 > 9007199254740991 then
    return redis.error_reply('RATELIMIT_STATE the erased key holds something that is not '
      .. 'the time resets erased')
  end
  return s + 0
end

local function expiry(k)
  local at = redis.pcall('PEXPIRETIME', k)
  if type(at) == 'table' then -- Redis 6.2 has no PEXPIRETIME
    local ttl = redis.call('PTTL', k)
    if ttl < 0 then return ttl end
    local t = redis.call('TIME')
    return t[1] * 1000 + math.floor(t[2] / 1000) + ttl
  end
  return at
end

-- A stamp lives no longer than its state. A refund or an adjustment may move the state's expiry
-- earlier (a token bucket's arrival time moved back); a stamp that outlived its state would name
-- the state made after it, and a spend of the old state would be given back to the new one
-- (probes_redis_refunds: a bucket given back to expired, a plain call made it again without
-- its shift, and a spend of the old state gave back that call's time). So after either, the
-- stamp expires when the state does (with it, when the state is gone).
local function stamp_follows(state, stamp)
  local ttl = redis.call('PTTL', state)
  if ttl == -2 then
    redis.call('DEL', stamp)
  elseif ttl >= 0 then
    local left = redis.call('PTTL', stamp)
    if left == -1 or left > ttl then redis.call('PEXPIRE', stamp, ttl) end
  end
end

-- The end of the token bucket at `k` at `now` (microseconds): when it is full again, its
-- arrival time ("T<tat>", or with a refund's runs "T<tat>:..."), or `now` where that is later
-- or no bucket is there (nothing, or another strategy's state).
local function bucket_end(k, now)
  local raw = redis.pcall('GET', k)
  local tat = type(raw) == 'string' and string.match(raw, '^T([1-9]%d*)')
  tat = tat and #tat <= 16 and tat + 0
  return math.max(tat or 0, now)
end

-- A give-back (a reward, a refund, a lease's units given back) of the token bucket at `k`,
-- whose end was `before` (`bucket_end`, read before it): what it moved the end back by added
-- to the erased key `erased_key`, which holds `erased` (`erased_of`, read before anything
-- was written: nil, none, a key nothing carries, and nothing is written), as a reset adds
-- what it erased (lua/reset.lua), its expiry kept: the end a read of a carried state tells
-- never moves back (lua/level.lua), so what was spent there between a carried spend's read
-- and its script and given back after its script is still seen by its read after (7 s owed
-- on a Cluster where one server owes 11 s: `probe82_a_reward_of_the_old_state_before_the_
-- read_after`, lua_carry/). The growth it then reads, a spend and its give-back both after
-- the script, is not owed: the carry takes only what exceeds the moved bucket's slack
-- (`tickets` in lua/carry.lua).
local function erase_given(k, erased_key, erased, before, now)
  if not erased then return end
  local back = before - bucket_end(k, now)
  if back > 0 then
    local sum = math.min(erased + back, 4503599627370496)
    redis.call('SET', erased_key, string.format('%d', sum), 'KEEPTTL')
  end
end
