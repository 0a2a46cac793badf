-- Lease return: a lease a process drops (idle, or the store dropped): its units not spent are
-- given back to the key they came from, only while they are still the key's own: the fixed
-- window they were leased in (the key's expiry is that window's last millisecond), or the token
-- bucket's state as the lease left it (nobody has spent since). Anything else is left alone:
-- the units then expire with their window, or are refilled with the bucket, as if spent.
-- Either way the lease leaves the key's ledger (nothing of it can be spent any more), while
-- the ledger still holds it.
--
-- KEYS[1]: the limiter key
-- KEYS[2]: its lease ledger, see lua/ledger.lua (loaded in front of this file): the units go
--          back only while it holds them (a key re-created since, e.g. by a restarted Redis,
--          holds none), and the lease leaves it
-- ARGV[1]: 1 fixed window (integer state: a window of whole milliseconds), 4 token bucket
-- ARGV[2]: the units to give back (0: the lease only leaves the ledger)
-- ARGV[3]: fixed window: the end of the lease's window; token bucket: the theoretical arrival
--          time the lease wrote; in microseconds since the epoch
-- ARGV[4]: token bucket: the emission interval; fixed window: the window; in microseconds
-- ARGV[5]: what the lease put in the ledger (see lua/lease_grant.lua)
-- Returns: the units given back (0 when the state is no longer the lease's).

local key = KEYS[1]
local units = ARGV[2] + 0
local stamp = ARGV[3] + 0
if not ledger or ledger == 0 or not holds(ARGV[1], stamp, ARGV[4] + 0) then return 0 end
local retire = math.min(ARGV[5] + 0, ledger)
local raw = redis.pcall('GET', key)

if ARGV[1] == '1' then
  -- Not a count as fixed_window.lua writes it (prelude.lua's `decimal`, up to MAX_CAPACITY),
  -- or one that does not hold every unit leased out in its window: not the lease's.
  if type(raw) ~= 'string' or not string.find(raw, '^[1-9]%d*$') or raw + 0 > 4294967295
      or raw + 0 < ledger then
    return 0
  end
  redis.call('DECRBY', KEYS[2], retire)
  local n = math.min(units, retire)
  if n > 0 then redis.call('DECRBY', key, n) end
  return n
end

redis.call('DECRBY', KEYS[2], retire)
local span = units * (ARGV[4] + 0)
if units == 0 or raw ~= string.format('T%d', stamp) or span > retire then return 0 end
local tat = stamp - span
local t = redis.call('TIME')
if tat <= t[1] * 1000000 + t[2] then
  redis.call('DEL', key)
else
  redis.call('SET', key, string.format('T%d', tat), 'PXAT', math.floor((tat + 999) / 1000))
end
return units
