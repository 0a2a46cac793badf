-- Ledger: loaded in front of lua/lease_grant.lua, lua/lease_return.lua and lua/reset.lua.
-- A key's lease ledger, KEYS[2] (in the key's slot), holds what is leased out of KEYS[1] and
-- may still be spent by the processes holding it: units (fixed window), or their time in the
-- bucket, units x interval in microseconds (token bucket). A grant adds its slice and takes
-- out the lease it replaces (all spent); a return takes out the lease it ends; a reset keeps
-- counting what the ledger holds. It expires with the last slice's state.
--
-- Defines: ledger (the count it holds: 0 when absent, false when it is not a count), and
--          holds(kind, stamp, window): whether the ledger still holds what a lease put in it,
--          the lease's kind ('1' fixed window, '4' token bucket), stamp (its window's end, or
--          the arrival time it wrote, in microseconds) and window (microseconds, fixed window).

local ledger = redis.pcall('GET', KEYS[2])
if not ledger then
  ledger = 0
elseif type(ledger) == 'string' and string.match(ledger, '^%d+$') then
  ledger = ledger + 0
else
  ledger = false
end

local function holds(kind, stamp, window)
  local t = redis.call('TIME')
  local now = t[1] * 1000000 + t[2]
  -- The token bucket's ledger expires once every slice's time has passed.
  if kind == '4' then return stamp > now end
  -- The fixed window's expires with the window: the lease's must be the current one.
  local start = math.floor(now / window) * window
  if start > now then start = start - window elseif start + window <= now then start = start + window end
  return stamp == start + window
end

-- The error reply for a ledger that is not a count: nothing is written.
local function not_a_count()
  return redis.error_reply('RATELIMIT_STATE the lease ledger holds a '
    .. redis.call('TYPE', KEYS[2])['ok'] .. ' that is not a count')
end
