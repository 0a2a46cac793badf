-- Lease return: units a process leased and did not spend, given back to the key they came
-- from, only while they are still the key's own: the fixed window they were leased in (the
-- key's expiry is that window's last millisecond), or the token bucket's state as the lease
-- left it (nobody has spent since). Anything else is left alone: the units then expire with
-- their window, or are refilled with the bucket, as if spent.
--
-- KEYS[1]: the limiter key
-- ARGV[1]: 1 fixed window (integer state: a window of whole milliseconds), 4 token bucket
-- ARGV[2]: the units to give back, at least 1
-- ARGV[3]: fixed window: the end of the lease's window; token bucket: the theoretical arrival
--          time the lease wrote; in microseconds since the epoch
-- ARGV[4]: token bucket: the emission interval, in microseconds
-- Returns: the units given back (0 when the state is no longer the lease's).

local key = KEYS[1]
local units = ARGV[2] + 0
local stamp = ARGV[3] + 0

if ARGV[1] == '1' then
  local raw = redis.pcall('GET', key)
  -- Not a count as fixed_window.lua writes it (prelude.lua's `decimal`, up to MAX_CAPACITY)
  if type(raw) ~= 'string' or not string.find(raw, '^[1-9]%d*$') or raw + 0 > 4294967295 then
    return 0
  end
  -- Redis 6.2 has no PEXPIRETIME (an error reply): the window cannot be told, keep the units
  local expiry = redis.pcall('PEXPIRETIME', key)
  if type(expiry) ~= 'number' or expiry ~= stamp / 1000 - 1 then return 0 end
  local n = math.min(units, raw + 0)
  if n > 0 then redis.call('DECRBY', key, n) end
  return n
end

local raw = redis.pcall('GET', key)
if raw ~= string.format('T%d', stamp) then return 0 end
local tat = stamp - units * (ARGV[4] + 0)
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if tat <= now then
  redis.call('DEL', key)
else
  redis.call('SET', key, string.format('T%d', tat), 'PXAT', math.floor((tat + 999) / 1000))
end
return units
