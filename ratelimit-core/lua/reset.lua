-- Reset: forgets the limiter key's state, except the units leased out to processes at that
-- moment (recorded beside the key by lua/lease_grant.lua), which stay counted until their
-- lease gives them back (lua/lease_return.lua) or they expire with their window or bucket
-- slots: a process holding a lease cannot see a reset made elsewhere, so a reset that forgot
-- its units would let them be spent twice. Without a lease out, the key is deleted.
--
-- KEYS[1]: the limiter key
-- KEYS[2]: its lease ledger, see lua/ledger.lua (loaded in front of this file)
-- ARGV[1]: what the resetting process's own lease, dropped with the reset, put in the ledger
--          (0 for none); taken out while the ledger holds it
-- ARGV[2], ARGV[3], ARGV[4]: that lease's kind ('1' or '4'), stamp and window (see
--          lua/ledger.lua's `holds`)
-- Returns: 1 when the key held state, else 0; or the RATELIMIT_STATE error reply for a ledger
--          that is not a count, with nothing written.

local key, ledger_key = KEYS[1], KEYS[2]
local held = redis.call('EXISTS', key)
if ledger == false then return not_a_count() end
local out = ledger
if ARGV[1] ~= '0' and holds(ARGV[2], ARGV[3] + 0, ARGV[4] + 0) then out = out - ARGV[1] end

-- What is still leased out, kept counted in the state; false when nothing can be kept.
local function keep()
  local raw = redis.pcall('GET', key)
  if type(raw) ~= 'string' then return false end
  if string.match(raw, '^%d+$') then -- a fixed window of whole milliseconds: its count
    local n = math.min(raw + 0, out)
    if n == 0 then return false end
    redis.call('SET', key, n, 'KEEPTTL')
    redis.call('SET', ledger_key, n, 'KEEPTTL')
    return true
  end
  local start, window, count = string.match(raw, '^F(%d+):(%d+):(%d+)$')
  if start then -- a fixed window of another length: its count
    local n = math.min(count + 0, out)
    if n == 0 then return false end
    redis.call('SET', key, string.format('F%s:%s:%d', start, window, n), 'KEEPTTL')
    redis.call('SET', ledger_key, n, 'KEEPTTL')
    return true
  end
  local tat = string.match(raw, '^T(%d+)$')
  if tat then -- a token bucket: full but for the leased units' time, until the last slice ends
    local t = redis.call('TIME')
    local now = t[1] * 1000000 + t[2]
    local kept = math.min(tat + 0, now + out)
    local ends = redis.call('PTTL', ledger_key)
    if ends > 0 then kept = math.min(kept, now + ends * 1000) end
    if kept <= now then return false end
    redis.call('SET', key, string.format('T%d', kept), 'PXAT', math.floor((kept + 999) / 1000))
    redis.call('SET', ledger_key, out, 'KEEPTTL')
    return true
  end
  return false
end

if held == 1 and out > 0 and keep() then return 1 end
redis.call('DEL', key, ledger_key)
return held
