-- Stacked limits: several limiter keys decided as one call, all or nothing. The
-- strategies' scripts are loaded in front of this file, each wrapped as a function of
-- (KEYS, ARGV), and then `scripts`, the table of those functions in the order of the table of
-- algorithms (see `STACKED` in src/store/redis/scripts.rs), so every rule is the one the
-- single-key scripts follow, word for word.
--
-- KEYS[i]: the i-th limit's key. In a cluster, all in one hash slot: the service's keys of one
--          user key share their hash tag.
-- ARGV[1]: 1 to record an admitted call, 0 to only look; 2 to record it as a spend that may
--          be given back (lua/refund.lua): then KEYS[n + i] is the i-th key's stamp key (in
--          its slot: `beside` in src/store/redis/ledger.rs) and the last argument a stamp
--          drawn for this call, written to each stamp key that holds none
-- ARGV[4i - 2 .. 4i + 1] (i from 1): the i-th limit's strategy (its place in `scripts`, from
--          1: `stacked_index` in scripts.rs), the two numbers its script takes as ARGV[1]
--          and ARGV[2], and the call's cost under it
-- Returns: the limits' replies end to end, five integers each, as the single scripts return
--          them (six with ARGV[1] 2: then the key's stamp, 0 when the call was refused); or
--          the first error reply a limit gave (state of an unexpected shape), with nothing
--          written.
-- Every limit is looked at first; only when every one admits the call is each one recorded,
-- so a call refused by one limit spends nothing from the others. Each record writes its own
-- key's expiry, as the single scripts do.
--
-- A stamp names the state a spend was made on: a reset deletes it (lua/reset.lua), and a key
-- Redis lost (a restart, a flush) has none or a new one, so a refund made for the old state
-- gives nothing back. It lives at least as long as its key's state (when the state expires,
-- every spend made on it has stopped counting, and a refund gives nothing back anyway).

local stamping = ARGV[1] == '2'
local n = stamping and #KEYS / 2 or #KEYS

local function decide(i, flag)
  local a = 4 * i - 2
  -- The fifth argument asks for the full reply, five integers, whatever the strategy.
  return scripts[ARGV[a] + 0]({KEYS[i]}, {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], flag, '1'})
end

-- The absolute expiry of `k` in milliseconds (-1: none, -2: no key).
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

-- The stamp key i holds (nil: none), or the error reply for one not of a stamp's shape.
local function held_stamp(i)
  local s = redis.pcall('GET', KEYS[n + i])
  if type(s) == 'table' then
    return redis.error_reply('RATELIMIT_STATE the stamp key holds a '
      .. redis.call('TYPE', KEYS[n + i])['ok'] .. ' that is not a stamp')
  end
  if s and not string.find(s, '^[1-9]%d*$') then
    return redis.error_reply('RATELIMIT_STATE the stamp key holds a string that is not a stamp')
  end
  return s
end

local replies, stamps = {}, {}
local admitted = true
for i = 1, n do
  local reply = decide(i, '0')
  if reply.err then return reply end
  replies[i] = reply
  if reply[1] == 0 then admitted = false end
  if stamping then
    local s = held_stamp(i)
    if type(s) == 'table' then return s end
    stamps[i] = s or ARGV[#ARGV]
  end
end
local record = admitted and (ARGV[1] == '1' or stamping)
if record then
  for i = 1, n do
    local reply = decide(i, '1')
    if reply.err then return reply end
    replies[i] = reply
  end
end

local out = {}
for i = 1, n do
  for j = 1, 5 do out[#out + 1] = replies[i][j] end
  if stamping then
    if record then
      -- Kept as long as the key's state at least (which every record gives an expiry).
      local until_ms = math.max(expiry(KEYS[i]), expiry(KEYS[n + i]))
      if until_ms > 0 then
        redis.call('SET', KEYS[n + i], stamps[i], 'PXAT', string.format('%d', until_ms))
      end
    end
    out[#out + 1] = record and stamps[i] + 0 or 0
  end
end
return out
