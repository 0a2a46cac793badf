-- Stacked limits: several limiter keys decided as one call, all or nothing. The
-- strategies' scripts are loaded in front of this file, each wrapped as a function of
-- (KEYS, ARGV), and then `scripts`, the table of those functions in the order of the table of
-- algorithms (see `STACKED` in src/store/redis/scripts.rs), so every rule is the one the
-- single-key scripts follow, word for word.
--
-- KEYS[i]: the i-th limit's key. In a cluster, all in one hash slot: the service's keys of one
--          user key share their hash tag.
-- ARGV[1]: 1 to record an admitted call, 0 to only look
-- ARGV[4i - 2 .. 4i + 1] (i from 1): the i-th limit's strategy (its place in `scripts`, from
--          1: `stacked_index` in scripts.rs), the two numbers its script takes as ARGV[1]
--          and ARGV[2], and the call's cost under it
-- Returns: the limits' replies end to end, five integers each, as the single scripts return
--          them; or the first error reply a limit gave (state of an unexpected shape), with
--          nothing written.
-- Every limit is looked at first; only when every one admits the call is each one recorded,
-- so a call refused by one limit spends nothing from the others. Each record writes its own
-- key's expiry, as the single scripts do.

local function decide(i, flag)
  local a = 4 * i - 2
  -- The fifth argument asks for the full reply, five integers, whatever the strategy.
  return scripts[ARGV[a] + 0]({KEYS[i]}, {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], flag, '1'})
end

local replies = {}
local admitted = true
for i = 1, #KEYS do
  local reply = decide(i, '0')
  if reply.err then return reply end
  replies[i] = reply
  if reply[1] == 0 then admitted = false end
end
if admitted and ARGV[1] == '1' then
  for i = 1, #KEYS do
    local reply = decide(i, '1')
    if reply.err then return reply end
    replies[i] = reply
  end
end

local out = {}
for i = 1, #KEYS do
  for j = 1, 5 do out[#out + 1] = replies[i][j] end
end
return out
