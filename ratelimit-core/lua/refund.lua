-- Refunds: spends of one call given back, to every limit it spent from or to none. The
-- strategies' scripts are loaded in front of this file as functions, with `scripts`, the
-- table of them, as for lua/stacked.lua, and lua/beside.lua.
--
-- KEYS[i] (i from 1 to n): the i-th limit's key; KEYS[n + i]: its stamp key (see
--          lua/stacked.lua, which writes it for a spend that may be given back);
--          KEYS[2n + i]: its erased key: a token bucket carried from another Cluster slot
--          adds what was given back to it (`erase_given` in lua/beside.lua; nothing without).
-- ARGV[7i - 6 .. 7i] (i from 1): the i-th limit's strategy (its place in `scripts`), the
--          two numbers its script takes as ARGV[1] and ARGV[2], the spend's cost, its
--          instant (the admitted reply's `reset_at`, in microseconds: where each strategy's
--          refund finds it), the state's shift its reply gave (0 but for a token bucket
--          something was given back to) and the stamp its reply gave.
-- ARGV[7n + 1], when there: only ask, nothing written (a call's spends in several Redis
--          Cluster slots, each slot asked before any is given back: store/redis/slots.rs).
-- Returns: 1 when every spend was given back (or, asking, would be); 0, nothing written, when
--          one of them gives nothing (its key holds another stamp or none: reset, or lost and
--          made again; or the spend no longer counts). Or the first error reply a limit gave
--          (state of an unexpected shape), nothing written.

local n = #KEYS / 3
local asks = #ARGV > 7 * n

local function refund(i, flag)
  local a = 7 * i - 6
  return scripts[ARGV[a] + 0]({KEYS[i]},
    {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], flag, '1', ARGV[a + 4], ARGV[a + 5]})
end

for i = 1, n do
  local held = beside_number(KEYS[n + i], 'stamp')
  if type(held) == 'table' then return held end
  if held ~= ARGV[7 * i] then return 0 end
  -- One spend is given back (or not) in one run; several are each asked first.
  if n > 1 or asks then
    local would = refund(i, '3')
    if type(would) == 'table' and would.err then return would end
    if would ~= 1 then return 0 end
  end
end
if asks then return 1 end
-- The erased keys (none, but for a state carried from another Cluster slot) read before
-- anything is written, and the ends given back from.
-- Redis' clock is read only where one is carried.
local erased, before, now = {}, {}, nil
for i = 1, n do
  local e = erased_of(KEYS[2 * n + i])
  if type(e) == 'table' then return e end
  if e and not now then
    local t = redis.call('TIME')
    now = t[1] * 1000000 + t[2]
  end
  erased[i] = e
  before[i] = e and bucket_end(KEYS[i], now)
end
local function erase(i)
  if erased[i] then erase_given(KEYS[i], KEYS[2 * n + i], erased[i], before[i], now) end
end
-- Each stamp then expires no later than its state (see stamp_follows in lua/beside.lua).
if n == 1 then
  local given = refund(1, '2')
  if given == 1 then
    stamp_follows(KEYS[1], KEYS[2])
    erase(1)
  end
  return given
end
for i = 1, n do
  refund(i, '2')
  stamp_follows(KEYS[i], KEYS[n + i])
  erase(i)
end
return 1
