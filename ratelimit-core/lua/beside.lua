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
--          2^53), nil without the key, or the RATELIMIT_STATE error reply for anything else.

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
