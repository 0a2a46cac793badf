-- Stacked limits: several limiter keys decided as one call, all or nothing. The
-- strategies' scripts are loaded in front of this file, each wrapped as a function of
-- (KEYS, ARGV), and then `scripts`, the table of those functions in the order of the table of
-- algorithms (see `FUNCTIONS` in src/store/redis/scripts.rs), so every rule is the one the
-- single-key scripts follow, word for word; and lua/beside.lua, for the keys beside states.
--
-- KEYS[i]: the i-th limit's key (i from 1 to n). In a cluster, all in one hash slot: the
--          service's keys of one user key share their hash tag (an old state's too, carried
--          or decided: it has the same user key). Then, each set in its keys'
--          slots (`beside` in src/store/redis/ledger.rs):
--          - with ARGV[1] 2, the n stamp keys (KEYS[n + i]);
--          - with ARGV[2]'s first bit, the n block keys, after the stamp keys if any;
--          then four for each carried state (see below): its key and its block key, and the
--          key it is carried into and that key's block key.
-- ARGV[1]: 1 to record an admitted call, 0 to only look; 2 to record it as a spend that may
--          be given back (lua/refund.lua): the last argument is then a stamp drawn for this
--          call, written to each stamp key that holds none
-- ARGV[2]: 1 when some limit blocks its key once refused (its block below is not 0), plus
--          twice the number m of states carried (one number: Redis turns each argument
--          into a Lua string on every call)
-- ARGV[5i - 2 .. 5i + 2] (i from 1): the i-th limit's strategy (its place in `scripts`, from
--          1: `stacked_index` in scripts.rs), the two numbers its script takes as ARGV[1]
--          and ARGV[2], the call's cost under it, and its block (`Quota::block`, in
--          microseconds; 0: none)
-- ARGV[5n + 14j - 11 .. 5n + 14j + 2] (j from 1 to m): the j-th state carried (`Carry`, see
--          below): the strategy, the two numbers and the block of the quota it was decided
--          under, then the same four of the quota of the state it is carried into, then 1
--          when its block alone is carried (`Carry::block_only`), else 0, plus 2 when the
--          state was read in another Cluster slot (lua/level.lua): its two numbers are then
--          the debt and the block left that script read, and its key and block key the mark
--          and the pending record beside the moved state, in its slot (see `given` and
--          `grow` in lua/carry.lua); 4 instead when what its debt grew by between two
--          reads is added (`grown` there: its numbers then the two ends and how long the
--          later lasts, its keys the same two); then, read in another slot, the end read
--          (else 0; growing, the call's slack, see `tickets` in lua/carry.lua), the time
--          resets and give-backs erased there (lua/level.lua: 0, none; the end read is then
--          no earlier; growing, the total added at the call's script), the id of the call
--          that will read again (else 0) and how long after this script its read after has
--          come, or never will (microseconds; see `pending_of` in lua/carry.lua), and,
--          read in another slot, this node's TIME taken before that read (`moved_clock`;
--          else 0), which its lateness is reckoned from (`late` in lua/carry.lua); then the
--          stamp, with ARGV[1] 2
-- Returns: the limits' replies end to end, five integers each, as the single scripts return
--          them (seven with ARGV[1] 2: then the state's shift, 0 but for a token bucket
--          something was given back to, and the key's stamp, 0 when the call was refused);
--          then, for each state read in another slot by a call that reads again whose debt
--          is carried, in order, its ticket: two integers (`tickets` in lua/carry.lua); or
--          the first error reply a limit or a carried state gave (state of an unexpected
--          shape; RATELIMIT_LATE, a state read in another slot past its call's wait: `late`
--          in lua/carry.lua), with nothing written. With no limit (n 0) only the states are carried.
-- Every limit is looked at first; only when every one admits the call is each one recorded,
-- so a call refused by one limit spends nothing from the others. Each record writes its own
-- key's expiry, as the single scripts do.
--
-- A block (`block_for`): a limit with one whose key is blocked refuses the call, whatever its
-- algorithm says, until the block's end, the time its block key holds (in microseconds,
-- expiring then): {0, 0, end, wait, TIME}, the wait end - TIME or the state's own wait for the
-- call where that is later (a look at it). A call that would record and that the
-- limit's algorithm refuses blocks its key for the limit's block from TIME (a block in force
-- is never shortened: none is, or the call was refused by it). A look never begins one.
--
-- A carried state (`Stacked::carried`): a state a reload moved a limit away from (another
-- key), carried into the moved limit's state before anything is looked at or decided, in
-- every mode (a look's too): its token bucket's debt as time (a penalty in microseconds;
-- none when its block alone is carried), its block as a block, by the rule of `Carry::debt`
-- and `Carry::block` (see lua/carry.lua, loaded in front of this file). Every carried state and every limit is read first (an error is returned before
-- anything is written), then each state is carried in order, then the call is decided.
--
-- A stamp names the state a spend was made on: a reset deletes it (lua/reset.lua), and a key
-- Redis lost (a restart, a flush) has none or a new one, so a refund made for the old state
-- gives nothing back. It lives until the last spend stamped with it stops counting (its
-- reply's reset_at, when the state expires at the latest), after which a refund gives
-- nothing back anyway.

local stamping = ARGV[1] == '2'
local spends = ARGV[1] ~= '0'
local flags = ARGV[2] + 0
local blocking = flags % 2 == 1
local m = (flags - flags % 2) / 2
local n = (#ARGV - 2 - (stamping and 1 or 0) - 14 * m) / 5
local blocks_at = (stamping and 2 or 1) * n -- the block keys follow this many keys
local carried_at = blocks_at + (blocking and n or 0) -- and the carried states' these

-- Redis' TIME, read once: every limit is decided, and every state carried, at this instant
-- (as the memory store decides them, under its locks). Read by each limit, a moved bucket
-- and its old state, spent by one call, were written microseconds apart, and the carry
-- rounded that up to a whole token of the moved one (5 spent in the old window and a minute
-- later 9 left where the bucket leaves 10: probes_carry_redis).
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]

local function decide(i, flag)
  local a = 5 * i - 2
  -- The fifth argument asks for the full reply, five integers, whatever the strategy.
  return scripts[ARGV[a] + 0]({KEYS[i]}, {ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], flag, '1'},
    nil, now)
end

local function block_of(i)
  return ARGV[5 * i + 2] + 0
end

-- One limit that spends is decided and recorded in one run: nothing else to look at first.
local alone = n == 1 and spends
local replies, stamps, held, blocked = {}, {}, {}, {}

-- The i-th limit looked at (decided and recorded with `flag` '1'), with what is read beside
-- its state first: a call is refused (with nothing written) for one of the wrong shape before
-- any state is. Its error reply, if any.
local function look_at(i, flag)
  blocked[i] = nil
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
      -- Its wait: the block's end, or the state's own wait for the call where that is later
      -- (`blocked_verdict` in src/store/memory/blocks.rs).
      local own = decide(i, '0')
      if own.err then return own end
      local wait = until_us - now
      if own[1] == 0 and own[4] > wait then wait = own[4] end
      replies[i] = {0, 0, until_us, wait, now}
    end
  end
  if not blocked[i] then
    local reply = decide(i, flag)
    if reply.err then return reply end
    replies[i] = reply
  end
end

-- The j-th carried state (`old`) and the state it is carried into (`moved`), as `carry` in
-- lua/carry.lua takes them.
local function carried(j)
  local k, a = carried_at + 4 * j - 4, 5 * n + 14 * j - 11
  local function state(key, at)
    return {key = KEYS[k + key], block_key = KEYS[k + key + 1], strategy = ARGV[at],
      first = ARGV[at + 1], second = ARGV[at + 2], block = ARGV[at + 3]}
  end
  local old = state(1, a)
  local flag = ARGV[a + 8] + 0
  old.block_only = flag % 2 == 1
  if flag >= 4 then
    old.grown = {from = old.first + 0, to = old.second + 0, lasts = old.block + 0,
      slack = ARGV[a + 9] + 0, since = ARGV[a + 10] + 0, pending = ARGV[a + 11]}
  elseif flag >= 2 then
    old.given = {debt = old.first + 0, block = old.second + 0, read_end = ARGV[a + 9] + 0,
      erased = ARGV[a + 10] + 0, pending = ARGV[a + 11], wait = ARGV[a + 12] + 0,
      began = ARGV[a + 13] + 0}
  end
  return old, state(3, a + 4)
end

if m > 0 then
  -- Everything read first, so that an error writes nothing; then each state carried.
  for j = 1, m do
    local old, moved = carried(j)
    local err = carry(old, moved, now, false)
    if err then return err end
  end
  for i = 1, n do
    local err = look_at(i, '0')
    if err then return err end
  end
  for j = 1, m do
    local old, moved = carried(j)
    local err = carry(old, moved, now, true)
    if err then return err end
  end
end

local admitted = true
for i = 1, n do
  local err = look_at(i, alone and '1' or '0')
  if err then return err end
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
  write_pending()
elseif spends then
  -- A limit with a block whose algorithm refused the call blocks its key.
  for i = 1, n do
    local block = block_of(i)
    if block > 0 and not blocked[i] and replies[i][1] == 0 then
      local until_us = now + block
      redis.call('SET', KEYS[blocks_at + i], string.format('%d', until_us), 'PXAT',
        string.format('%d', math.floor((until_us + 999) / 1000)))
      replies[i] = {0, 0, until_us, math.max(block, replies[i][4]), now}
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
for _, t in ipairs(tickets) do
  out[#out + 1] = t[1]
  out[#out + 1] = t[2]
end
return out
