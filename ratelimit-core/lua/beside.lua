-- What the scripts of several keys (lua/stacked.lua, lua/refund.lua) read beside a state:
-- its stamp or its block, each a key of its own in the state's slot holding one number.
--
-- Defines: beside_number(k, what): the number key `k` holds as the scripts write it (decimal
--          digits, no sign, no leading zero, below 2^53; nil: no key), or the RATELIMIT_STATE
--          error reply naming `what` for anything else there;
--          expiry(k): the absolute expiry of `k` in milliseconds (-1: none, -2: no key);
--          stamp_follows(state, stamp): see below;
--          erased_of(k): the time resets erased from a carried token bucket, beside it (see
--          lua/level.lua): a number (decimal digits, no sign, no leading zero but "0", below
--          2^53), nil without the key, or the RATELIMIT_STATE error reply for anything else;
--          bucket_end(k), erase(k, erased, from, to, now): see below.

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

-- The end a token bucket at `k` owes until (its arrival time, microseconds), or nil: no key,
-- another strategy's state, or a time of more than 16 digits (below 2^52: the ends read with
-- what `erase` adds stay exact).
local function bucket_end(k)
  local s = redis.pcall('GET', k)
  local tat = type(s) == 'string' and string.match(s, '^T([1-9]%d*)')
  return tat and #tat <= 16 and tat + 0 or nil
end

-- What a write moved a token bucket's end back by at `now` (a reset, a reward, a refund: from
-- `from` to `to`, each from bucket_end, `to` nil for a state gone), added to its erased key
-- `k`, which held `erased` before anything was written (erased_of: nil, no key, for a bucket
-- nothing carries, and nothing is written; its expiry kept). lua/level.lua counts it in every
-- end it reads of the bucket, so that a carried end never moves back: a reward or a refund
-- of the old state between a carrying read and the read after hid the spends between as a
-- reset did (probe82_a_reward_of_the_old_state_before_the_read_after, lua_carry.rs: 7 s owed
-- where one server owes 11 s).
local function erase(k, erased, from, to, now)
  if not (erased and from) then return end
  local by = from - math.max(to or now, now)
  if by > 0 then
    redis.call('SET', k, string.format('%d', math.min(erased + by, 4503599627370496)), 'KEEPTTL')
  end
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
