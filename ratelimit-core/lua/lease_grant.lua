-- Lease: a slice of one key's budget reserved for one process, in one script. The fixed window
-- and token bucket scripts are loaded in front of this file, each wrapped as a function of
-- (KEYS, ARGV) (see `GRANT` in src/store/redis/lease.rs), so a lease is decided and recorded by
-- the very rules, state and expiry of the normal decision on the same key: the normal path and
-- the leases share one budget, and in a cluster one key is one slot.
--
-- KEYS[1]: the limiter key
-- KEYS[2]: its lease ledger, see lua/ledger.lua (loaded in front of this file, after the two
--          strategies' scripts); one of another shape is the RATELIMIT_STATE error reply,
--          with nothing written
-- ARGV[1]: 1 fixed window, 4 token bucket (the strategy's number in lua/stacked.lua)
-- ARGV[2], ARGV[3]: the two numbers the strategy's script takes as its ARGV[1] and ARGV[2]
-- ARGV[4]: the cost of the call that asks, from 1 to the capacity
-- ARGV[5]: the slice wanted, at least the cost
-- ARGV[6]: the new lease's id (a number, not 0), its field in the ledger
-- ARGV[7]: the id of the lease this grant replaces (the asking process's last of this key,
--          all spent or carried into this call), removed from the ledger with the grant; 0 for
--          none
-- Returns: {granted, allowed, remaining, reset_at, retry_after, now}: `granted` units recorded
--          as spent (min(slice, what the window or bucket still allows), or 0 when even the
--          call's cost does not fit), then the strategy's full reply (five integers, see its
--          header) for recording `granted` when it is not 0, or for the call's cost, looked at
--          only, when it is (a refusal with its retry_after). Or the strategy's error reply
--          (RATELIMIT_STATE), with nothing written.

local run = fixed_window
if ARGV[1] == '4' then run = token_bucket end
local cost = ARGV[4] + 0

local function reply(granted, r)
  return {granted, r[1], r[2], r[3], r[4], r[5]}
end

if not ledger_kind() then return not_a_ledger() end

-- Records the lease in the ledger (and removes the one it replaces), the hash expiring no
-- sooner than the key's state.
local function lease_out(granted, ends)
  local amount = granted
  if ARGV[1] == '4' then amount = granted * ARGV[2] end
  redis.call('HSET', KEYS[2], ARGV[6], string.format('%d:%d', amount, ends))
  if ARGV[7] ~= '0' then redis.call('HDEL', KEYS[2], ARGV[7]) end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > redis.call('PTTL', KEYS[2]) then redis.call('PEXPIRE', KEYS[2], ttl) end
end

-- A look of cost 0: what the window or bucket still allows, now.
local look = run(KEYS, {ARGV[2], ARGV[3], '0', '0', '1'})
if look.err then return look end
if look[1] == 1 and look[2] >= cost then
  local granted = math.min(ARGV[5] + 0, look[2])
  local r = run(KEYS, {ARGV[2], ARGV[3], tostring(granted), '1', '1'})
  if r.err then return r end
  if r[1] == 1 then
    lease_out(granted, r[3])
    return reply(granted, r)
  end
  -- Not admitted after all (cannot happen: time only adds room): nothing was written.
  return reply(0, r)
end
local r = run(KEYS, {ARGV[2], ARGV[3], ARGV[4], '0', '1'})
if r.err then return r end
return reply(0, r)
