-- Lease return: a lease a process drops (idle, or the store dropped) leaves the key's ledger,
-- and its units not spent are given back to the key they came from, only while the ledger
-- holds the lease (a key reset or re-created since, e.g. by a Redis restarted empty, holds no
-- such lease: nothing is given back) and the state is still the lease's: the fixed window's
-- count holds every unit leased out in its window; the token bucket's state is as the lease
-- left it (nobody has spent since). Anything else is left alone: the units then expire with
-- their window, or are refilled with the bucket, as if spent.
--
-- KEYS[1]: the limiter key
-- KEYS[2]: its lease ledger, see lua/ledger.lua (loaded in front of this file)
-- KEYS[3]: its erased key: a token bucket carried from another Cluster slot adds what was
--          given back to it (`erase_given` in lua/beside.lua, loaded in front of this file;
--          nothing without it)
-- ARGV[1]: 1 fixed window (integer state: a window of whole milliseconds), 4 token bucket
-- ARGV[2]: the units to give back (0: the lease only leaves the ledger)
-- ARGV[3]: token bucket: the arrival time the lease wrote, in microseconds since the epoch
-- ARGV[4]: token bucket: the emission interval, in microseconds
-- ARGV[5]: the lease's id, its field in the ledger
-- Returns: the units given back (0 when the state is no longer the lease's).

local key = KEYS[1]
local units = ARGV[2] + 0
if ledger_kind() ~= 'hash' then return 0 end
local now = now_us()
local erased = erased_of(KEYS[3])
if type(erased) == 'table' then return erased end
local total = leased_out(now)
local mine = redis.call('HGET', KEYS[2], ARGV[5])
if not total or not mine then return 0 end
local amount, ends = string.match(mine, '^(%d+):(%d+)$')
redis.call('HDEL', KEYS[2], ARGV[5])
if units == 0 or ends + 0 <= now then return 0 end
local raw = redis.pcall('GET', key)

if ARGV[1] == '1' then
  -- Not a count as fixed_window.lua writes it (prelude.lua's `decimal`, up to MAX_CAPACITY),
  -- or one that does not hold every unit leased out in its window: not the lease's.
  if type(raw) ~= 'string' or not string.find(raw, '^[1-9]%d*$') or raw + 0 > 4294967295
      or raw + 0 < total then
    return 0
  end
  local n = math.min(units, amount + 0)
  redis.call('DECRBY', key, n)
  return n
end

local span = units * (ARGV[4] + 0)
if raw ~= string.format('T%d', ARGV[3] + 0) or span > amount + 0 then return 0 end
local before = erased and bucket_end(key, now)
local tat = ARGV[3] - span
if tat <= now then
  redis.call('DEL', key)
else
  redis.call('SET', key, string.format('T%d', tat), 'PXAT', math.floor((tat + 999) / 1000))
end
erase_given(key, KEYS[3], erased, before, now)
return units
