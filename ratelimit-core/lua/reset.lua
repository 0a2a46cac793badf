-- Reset: forgets the limiter key's state, except the units leased out to processes at that
-- moment (recorded beside the key by lua/lease_grant.lua), which stay counted until their
-- lease gives them back (lua/lease_return.lua) or they expire with their window or bucket
-- slots: a process holding a lease cannot see a reset made elsewhere, so a reset that forgot
-- its units would let them be spent twice. Without a lease out, the key is deleted.
--
-- KEYS[1]: the limiter key
-- KEYS[2]: its lease ledger, see lua/ledger.lua (loaded in front of this file)
-- KEYS[3]: its stamp key (see lua/stacked.lua), deleted: a spend made before the reset is
--          never given back to the state after it
-- KEYS[4]: its block key (see lua/stacked.lua), deleted: a reset lifts a block
-- KEYS[5]: its erased key, kept by lua/level.lua while the key is carried into a limit a
--          reload moved away from it, in another Cluster slot: a token bucket owing time when
--          it is reset adds that time to it (microseconds; its expiry kept), so that what its
--          end grew by before the reset still counts (see lua/level.lua); nothing is written
--          without it (a key nothing carries). Nothing decides by it.
-- ARGV[1]: the id of the resetting process's own lease of the key, dropped with the reset
--          (0 for none): it leaves the ledger
-- Returns: 1 when the key held state, else 0. The RATELIMIT_STATE error reply, with nothing
--          written, for a ledger not of its shape, for state that is not the key's
--          strategy's while leases are out (forgetting it would forget them), or for an
--          erased key not of its shape (lua/beside.lua, loaded in front of this file).

local key, ledger_key = KEYS[1], KEYS[2]
local held = redis.call('EXISTS', key)
local kind = ledger_kind()
if not kind then return not_a_ledger() end
local now = now_us()
local erased = erased_of(KEYS[5])
if type(erased) == 'table' then return erased end
local out, last = 0, 0
if kind == 'hash' then
  out, last = leased_out(now)
  if not out then return not_a_ledger() end
  if ARGV[1] ~= '0' then
    local mine = redis.call('HGET', ledger_key, ARGV[1])
    local amount, ends = string.match(mine or '', '^(%d+):(%d+)$')
    if amount and ends + 0 > now then out = out - amount end
  end
end

-- The state kept: only what is still leased out counted, or false when nothing is; the
-- error reply for state of another shape.
local function keep()
  local raw = redis.pcall('GET', key)
  if type(raw) ~= 'string' then return redis.error_reply('RATELIMIT_STATE the limiter key holds a '
    .. redis.call('TYPE', key)['ok'] .. ' while leases of it are out') end
  if string.match(raw, '^%d+$') then -- a fixed window of whole milliseconds: its count
    local n = math.min(raw + 0, out)
    if n == 0 then return false end
    redis.call('SET', key, n, 'KEEPTTL')
    return true
  end
  local start, window, count = string.match(raw, '^F(%d+):(%d+):(%d+)$')
  if start then -- a fixed window of another length: its count
    local n = math.min(count + 0, out)
    if n == 0 then return false end
    redis.call('SET', key, string.format('F%s:%s:%d', start, window, n), 'KEEPTTL')
    return true
  end
  -- (What refunds keep, "T<tat>:<shift>" and its runs, goes with the stamp the reset
  -- deletes.)
  local tat = string.match(raw, '^T(%d+)$') or string.match(raw, '^T(%d+):[%d:]+$')
  if tat then -- a token bucket: full but for the leased units' time, until the last lease ends
    local kept = math.min(tat + 0, now + out, last)
    if kept <= now then return false end
    redis.call('SET', key, string.format('T%d', kept), 'PXAT', math.floor((kept + 999) / 1000))
    return true
  end
  return redis.error_reply('RATELIMIT_STATE the limiter key holds a string of no strategy'
    .. ' while leases of it are out')
end

-- The end a token bucket owes until (see KEYS[5]), read before anything is written; the
-- time to it added to the erased key once nothing can fail (below 2^52: the ends read with
-- it stay exact).
local owed = erased and held == 1 and redis.pcall('GET', key)
owed = type(owed) == 'string' and string.match(owed, '^T([1-9]%d*)')
owed = owed and #owed <= 16 and owed + 0
local function erase()
  if owed and owed > now then
    local sum = math.min(erased + owed - now, 4503599627370496)
    redis.call('SET', KEYS[5], string.format('%d', sum), 'KEEPTTL')
  end
end

if held == 1 and out > 0 then
  local kept = keep()
  if type(kept) == 'table' then return kept end
  erase()
  redis.call('DEL', KEYS[3], KEYS[4])
  if ARGV[1] ~= '0' then redis.call('HDEL', ledger_key, ARGV[1]) end
  if kept then return 1 end
  redis.call('DEL', key)
  return 1
end
if ARGV[1] ~= '0' then redis.call('HDEL', ledger_key, ARGV[1]) end
if out <= 0 then redis.call('DEL', ledger_key) end
erase()
-- A key with a block in force but no state (it expired) was held all the same.
redis.call('DEL', key, KEYS[3])
if redis.call('DEL', KEYS[4]) == 1 then return 1 end
return held
