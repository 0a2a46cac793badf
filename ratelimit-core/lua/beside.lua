-- What the scripts of several keys (lua/stacked.lua, lua/refund.lua) read beside a state:
-- its stamp or its block, each a key of its own in the state's slot holding one number.
--
-- Defines: beside_number(k, what): the number key `k` holds as the scripts write it (decimal
--          digits, no sign, no leading zero, below 2^53; nil: no key), or the RATELIMIT_STATE
--          error reply naming `what` for anything else there;
--          expiry(k): the absolute expiry of `k` in milliseconds (-1: none, -2: no key).

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
