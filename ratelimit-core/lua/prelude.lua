-- Prelude: loaded in front of each strategy's script (the Rust side concatenates the two
-- into one script), so that what every script needs is written once.
--
-- KEYS[1]: the limiter key
-- ARGV[3]: cost, from 1 to the capacity; 0 (with ARGV[4] = 0) looks at the level, see
--          `algorithm::level`
-- ARGV[4]: 1 to record an admitted call, 0 to only look (nothing is written); 2 to give
--          back a spend of ARGV[3] that the decision's reply placed at ARGV[6] (its exact
--          `reset_at`, in microseconds: `spent`; ARGV[7] the shift it gave, see
--          token_bucket.lua), 3 to only ask whether it would be (see
--          lua/refund.lua, which checks the key's stamp first). A refund gives back only
--          while the spend still counts, and never past the quota: each script's refund
--          follows `Algorithm::refund` in its <name>.rs. It returns 1 when it gives (or would
--          give) back, else 0. 4 for a penalty of ARGV[3] units (spent whatever the
--          budget holds), 5 for a reward of up to ARGV[3] units (given back, never past the
--          quota): each script's follows `Algorithm::adjust` (see its header for where the
--          scripts' bounds differ) and returns the units spent or given back.
-- ARGV[5]: on a decision (ARGV[4] 0 or 1), two bits: 1 asks for the full reply (see each
--          script), 2 says the key is only ever asked under one window (the service's keys
--          name their quota; `StoreKey::names_its_window`): the scripts then skip reading
--          whose window a state is, which only a bare key needs (sliding_counter.lua's `ours`,
--          sliding_log.lua's `kept_longer`, for a log of the previous version: since, its
--          entries name their window). In one argument: Redis turns each into a Lua
--          string on every call.
-- Defines: key, cost, op and bits (ARGV[4] and ARGV[5]), commit, deciding (ARGV[4] 0 or 1),
--          refunding (2 or 3), giving (2), spent, adjusting (4 or 5), penalty (4), one_window,
--          short, time (`time(run_now)` reads Redis' own TIME, in microseconds since the
--          epoch: a call, so a script reads it only on the paths that need it), idiv,
--          unexpected, byte (string.byte), decimal, digits and the bounds MAX_CAPACITY,
--          MAX_NOW and MAX_EXACT.
-- Unexpected state: a key holding anything the strategy's script did not write (another type,
--          another strategy's encoding, a value of the wrong shape or out of the bounds below,
--          a window start off the window's boundaries) gets the error reply
--          "RATELIMIT_STATE the limiter key holds a <type> that is not <what the strategy
--          keeps>", and nothing is written: it is never read as a fresh key or a smaller count.
--          The rules of `Algorithm::written_for` (src/algorithm/<name>.rs), in microseconds.

local function idiv(a, b) -- floor(a / b), exact for integers below 2^53
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- Strings coerce to numbers in arithmetic: `x + 0` reads a number without the cost of a
-- call to tonumber(), which shows in Redis' CPU time per decision.
-- ARGV[4] and ARGV[5] read once each: in a script of its own ARGV is a global, and each read
-- of a global and its index costs about as much as a comparison's ten.
local key = KEYS[1]
local cost = ARGV[3] + 0
local op, bits = ARGV[4], ARGV[5]
local commit = op == '1'
local deciding = commit or op == '0'
local refunding = op == '2' or op == '3'
local giving = op == '2'
local spent = refunding and ARGV[6] + 0
local adjusting = op == '4' or op == '5'
local penalty = op == '4'
local one_window = deciding and (bits == '2' or bits == '3')
-- Whether a decision may answer in the short reply (ARGV[5] without its first bit).
local short = deciding and (bits == '0' or bits == '2')
-- `run_now`: the TIME a script deciding several limits read once for all of them (the
-- strategy's function's fourth argument, lua/stacked.lua), so that they are decided at one
-- instant as the memory store decides them; nil, Redis' TIME now. Each script asks
-- `time(run_now)`: a function made on every call that reads a local of the script's (here
-- run_now, `key` below) makes an upvalue with every call, 500-650 of Redis' instructions
-- (BENCHMARKS.md, "redis"); so neither `time` nor `unexpected` reads one.
local function time(given)
  if given then return given end
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

-- The error reply for state of an unexpected shape; `expected` names what the strategy keeps.
-- Return it before any write.
local function unexpected(expected)
  local kind = redis.call('TYPE', KEYS[1])['ok']
  return redis.error_reply('RATELIMIT_STATE the limiter key holds a ' .. kind
    .. ' that is not ' .. expected)
end


-- What a store writes (`State::written_by_a_store`): counts up to quota::MAX_CAPACITY, times up
-- to algorithm::MAX_NOW (in microseconds, rounded down); and here any number below 2^53, the
-- integers a Lua number holds exactly (a larger one would be read rounded).
local MAX_CAPACITY = 4294967295
local MAX_NOW = 8070450532247928
local MAX_EXACT = 9007199254740991

-- The number `s` holds when it is one as the scripts write it (decimal digits, no sign, no
-- leading zero) and at most `most` (below 2^53); else nil, the wrong shape. `digits` for an
-- `s` known to be decimal digits (a pattern's `(%d+)` capture): the same rule without a
-- second pattern, which shows in Redis' CPU time per decision (a log entry holds four).
local byte = string.byte
local function digits(s, most)
  if #s > 1 and byte(s) == 48 then return nil end -- a leading zero
  local n = s + 0
  if n > most then return nil end
  return n
end
local function decimal(s, most)
  if not string.find(s, '^%d+$') then return nil end
  return digits(s, most)
end
