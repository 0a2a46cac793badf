-- Stacked limits: several limiter keys decided as one call, all or nothing. The
-- strategies' scripts are loaded in front of this file, each wrapped as a function of
-- (KEYS, ARGV), and then `scripts`, the table of those functions in the order of the table of
-- algorithms (see `FUNCTIONS` in src/store/redis/scripts.rs), so every rule is the one the
-- single-key scripts follow, word for word; and lua/beside.lua, for the keys beside states.
--
-- KEYS[i]: the i-th limit's key (i from 1 to n). In a cluster, all in one hash slot: the
--          service's keys of one user key share their hash tag. Then, each set in its keys'
--          slots (`beside` in src/store/redis/ledger.rs):
--          - with ARGV[1] 2, the n stamp keys (KEYS[n + i]);
--          - with ARGV[2] 1, the n block keys, after the stamp keys if any.
-- ARGV[1]: 1 to record an admitted call, 0 to only look; 2 to record it as a spend that may
--          be given back (lua/refund.lua): the last argument is then a stamp drawn for this
--          call, written to each stamp key that holds none
-- ARGV[2]: 1 when some limit blocks its key once refused (its block below is not 0)
-- ARGV[5i - 2 .. 5i + 2] (i from 1): the i-th limit's strategy (its place in `scripts`, from
--          1: `stacked_index` in scripts.rs), the two numbers its script takes as ARGV[1]
--          and ARGV[2], the call's cost under it, and its block (`Quota::block`, in
--          microseconds; 0: none)
-- Returns: the limits' replies end to end, five integers each, as the single scripts return
--          them (seven with ARGV[1] 2: then the state's shift, 0 but for a token bucket
--          something was given back to, and the key's stamp, 0 when the call was refused); or
--          the first error reply a limit gave (state of an unexpected shape), with nothing
--          written.
-- Every limit is looked at first; only when every one admits the call is each one recorded,
-- so a call refused by one limit spends nothing from the others. Each record writes its own
-- key's expiry, as the single scripts do.
--
-- A block (`block_for`): a limit with one whose key is blocked refuses the call, whatever its
-- algorithm says, until the block's end, the time its block key holds (in microseconds,
-- expiring then): {0, 0, end, end - TIME, TIME}. A call that would record and that the
-- limit's algorithm refuses blocks its key for the limit's block from TIME (a block in force
-- is never shortened: none is, or the call was refused by it). A look never begins one.
--
-- A stamp names the state a spend was made on: a reset deletes it (lua/reset.lua), and a key
-- Redis lost (a restart, a flush) has none or a new one, so a refund made for the old state
-- gives nothing back. It lives until the last spend stamped with it stops counting (its
-- reply's reset_at, when the state expires at the latest), after which a refund gives
-- nothing back anyway.

local stamping = ARGV[1] == '2'
local spends = ARGV[1] ~= '0'
local n = (#ARGV - 2 - (stamping and 1 or 0)) / 5
local blocks_at = (stamping and 2 or 1) * n -- the block keys follow this many keys

local function decide(i, flag)
  local a = 5 * i - 2
  -- The fifth argument asks for the full reply, five integers, whatever the strategy.
  return scripts[ARGV[a] + 0]({KEYS[i]}, {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], flag, '1'})
end

local function block_of(i)
  return ARGV[5 * i + 2] + 0
end

local now
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- One limit that spends is decided and recorded in one run: nothing else to look at first.
local alone = n == 1 and spends
local replies, stamps, held, blocked = {}, {}, {}, {}
local admitted = true
for i = 1, n do
  -- What is read beside the state first: a call is refused (with nothing written) for one of
  -- the wrong shape before any state is.
  if stamping then
    local s = beside_number(KEYS[n + i], 'stamp')
    if type(s) == 'table' then return s end
    -- A stamp whose state is gone (deleted alone) names no state: a new one is drawn.
    held[i] = s ~= nil and redis.call('EXISTS', KEYS[i]) == 1
    stamps[i] = held[i] and s or ARGV[#ARGV]
  end
  if block_of(i) > 0 then
    local until_us = beside_number(KEYS[blocks_at + i], 'block')
    if type(until_us) == 'table' then return until_us end
    until_us = until_us and until_us + 0
    if until_us and until_us > now then
      blocked[i] = true
      replies[i] = {0, 0, until_us, until_us - now, now}
    end
  end
  if not blocked[i] then
    local reply = decide(i, alone and '1' or '0')
    if reply.err then return reply end
    replies[i] = reply
  end
  if replies[i][1] == 0 then admitted = false end
end
local record = admitted and spends
if record then
  -- (A limit alone was recorded by its decision.)
  for i = 1, alone and 0 or n do
    local reply = decide(i, '1')
    if reply.err then return reply end
    replies[i] = reply
  end
elseif spends then
  -- A limit with a block whose algorithm refused the call blocks its key.
  for i = 1, n do
    local block = block_of(i)
    if block > 0 and not blocked[i] and replies[i][1] == 0 then
      local until_us = now + block
      redis.call('SET', KEYS[blocks_at + i], string.format('%d', until_us), 'PXAT',
        string.format('%d', math.floor((until_us + 999) / 1000)))
      replies[i] = {0, 0, until_us, block, now}
    end
  end
end

local out = {}
for i = 1, n do
  for j = 1, 5 do out[#out + 1] = replies[i][j] end
  if stamping then
    out[#out + 1] = replies[i][6] or 0
    if record then
      -- Kept at least until this spend stops counting, its reply's reset_at, when the key's
      -- state expires at the latest (every record sets that expiry); never shortened.
      local until_ms = string.format('%d', math.floor((replies[i][3] + 999) / 1000))
      if not held[i] then
        redis.call('SET', KEYS[n + i], stamps[i], 'PXAT', until_ms)
      elseif type(redis.pcall('PEXPIREAT', KEYS[n + i], until_ms, 'GT')) == 'table' then
        -- Redis 6.2 has no GT.
        if expiry(KEYS[n + i]) < until_ms + 0 then
          redis.call('PEXPIREAT', KEYS[n + i], until_ms)
        end
      end
    end
    out[#out + 1] = record and stamps[i] + 0 or 0
  end
end
return out
