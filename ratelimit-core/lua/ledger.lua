-- Ledger: loaded in front of lua/lease_grant.lua, lua/lease_return.lua and lua/reset.lua.
-- A key's lease ledger, KEYS[2] (in the key's slot), is a hash of the leases taken out of
-- KEYS[1] that their processes may still spend: one field per lease, named by the lease's id
-- (a number its process draws), holding "<amount>:<ends>": the units (fixed window) or their
-- time in the bucket (units x interval, in microseconds; token bucket) the grant recorded as
-- spent, and when the last of them stops counting (the window's end, or the arrival time the
-- grant wrote; microseconds since the epoch). A grant adds its lease and removes the one it
-- replaces (all spent); a return removes the lease it ends; a reset keeps counting the leases
-- still there. Removing a lease by its id twice removes nothing the second time. The hash
-- expires with the last lease's state.
--
-- Defines: now_us(), ledger_kind() ('none', 'hash', or false: another type), and
--          leased_out(now): the total amount and the latest end of the leases counting at
--          `now`, or false when a field is not of the ledger's shape.

local function now_us()
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

local function ledger_kind()
  local kind = redis.call('TYPE', KEYS[2])['ok']
  if kind == 'none' or kind == 'hash' then return kind end
  return false
end

local function leased_out(now)
  local fields = redis.call('HGETALL', KEYS[2])
  local total, last = 0, 0
  for i = 1, #fields, 2 do
    local amount, ends = string.match(fields[i + 1], '^([1-9]%d*):([1-9]%d*)$')
    -- Exact as Lua numbers (below 2^53), as every amount and time a grant writes is.
    if not amount or #amount > 15 or #ends > 16 or not string.find(fields[i], '^[1-9]%d*$') then
      return false
    end
    if ends + 0 > now then
      total = total + amount
      last = math.max(last, ends + 0)
    end
  end
  return total, last
end

-- The error reply for a ledger not of this shape: nothing is written.
local function not_a_ledger()
  return redis.error_reply('RATELIMIT_STATE the lease ledger holds a '
    .. redis.call('TYPE', KEYS[2])['ok'] .. ' that is not a ledger of leases')
end
