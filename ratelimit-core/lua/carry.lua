-- Carrying a state a reload moved a limit away from (another key: another window, tier name
-- or key prefix) into the moved limit's state, for lua/stacked.lua, which is loaded behind
-- this file (the strategies' scripts as functions, `scripts` and lua/beside.lua in front of
-- it): `Stacked::carried`, `Carry` in src/store/stacked.rs. What the old state holds that
-- outlasts its window (a token bucket's debt, a penalty's, a block) is written into the moved
-- state before the call is decided, so the moved state is never fresher than the old one.
--
-- Defines: carried_time(debt_o, debt_n): the rule of `Carry::debt`, in microseconds (below);
--          carry(old, moved, now, write): see below.
--
-- The rule (`Carry::debt`, the one every store carries by; here in microseconds, there in
-- nanoseconds): of two token buckets, the old one owing debt_o (the time until it is full
-- again, from `now`) and the moved one owing debt_n, the moved one owes debt_o - debt_n more,
-- 0 when that is not above 0: full again exactly when the old one is, whatever each one's
-- interval (a bucket's state is a debt in time, carried as time). Carried in whole tokens of
-- the moved bucket, each chained move rounded the debt up a token again (probes_carry_attacks).
-- Exact: every number is an integer below 2^53 (a debt is within a store's times).

local function carried_time(debt_o, debt_n)
  return math.max(debt_o - debt_n, 0)
end

-- A look of cost 0 at `state`'s key under its quota at `now`: the strategy's full reply, or
-- its error.
local function level(state, now)
  return scripts[state.strategy + 0]({state.key}, {state.first, state.second, '0', '0', '1'},
    nil, now)
end

-- Carries `old` into `moved` at `now` (Redis' TIME, read by the caller) when `write`, else only
-- reads what that reads; the first error reply (state of an unexpected shape), if any. Each
-- is {key, block_key, strategy, first, second, block}: its key, its block key, and its
-- quota's numbers as lua/stacked.lua takes a limit's (strategy, ARGV[1] and ARGV[2] of its
-- script, block in microseconds), all strings; `old` also has block_only, true when its
-- block alone is carried (`Carry::block_only`: while the old state is decided with the call,
-- whose debt holds the call by itself, its block is carried into the moved state and the
-- moved state's into it, `old` then the moved one), which reads no bucket.
-- `old` may instead be `given`, read in its own Cluster slot by lua/level.lua (a state in
-- another slot than the moved one, which no script reads beside it): {debt, block}, the time
-- its bucket owes and what is left of its block, in microseconds from that script's TIME,
-- which came first; each counted from `now` here (later), so carried no shorter. Its key and
-- block key are then the moved state's own (in this slot), never read.
-- `old` may instead be `grown` (see `grow` below), its key the mark beside the moved state.
-- - Both with a block (`Carry::block`): a block of the old key until U > now is written to
--   the moved key's block key, until U and expiring then (as lua/stacked.lua writes blocks),
--   unless it holds one as late or later: never shortened.
-- - Both token buckets, not block_only: the old state is looked at (its reply's reset_at is
--   when it is full again), then the moved one, both at `now`, each debt measured from it;
--   the moved state owes `carried_time` more: its script in its adjust mode (as
--   lua/adjust.lua runs it), a penalty of that many tokens of a microsecond each (the
--   interval, ARGV[1], is all a penalty reads of the quota: `Gcra::owe`'s time, in the
--   penalty's one rule). A penalty never moves the state's expiry earlier, so its stamp,
--   kept no longer than the state, needs no change.
-- What an old state in another Cluster slot (`old.grown`) owes more than a call that read it
-- carried: its debt's end, on its node's clock, was `from` at that read and `to` at a read
-- after the call's script (`run_checked` in src/store/redis/stacked.rs: spends written there
-- between, by a pod still deciding on it and on the moved state, would otherwise be covered
-- by the next carry). Added whole to the moved token bucket (a penalty of that time: the
-- carry's rule takes only the excess of one debt over the other, which a spend on the moved
-- state already covered), but for what the mark `old.key` says an earlier such addition took
-- (the end it reached), so that calls that read before the same writes add them once; and
-- never past a bucket spent from `now` (what admitted spends leave at most: a later one the
-- old state's own debt holds, which every later call carries). The mark then holds `to`,
-- expiring after that debt has run out (`lasts`, plus a second for the nodes' clocks).
local function grow(old, moved, now, write)
  if scripts[moved.strategy + 0] ~= token_bucket then return nil end
  local into = level(moved, now)
  if into.err then return into end
  local marked = beside_number(old.key, 'mark')
  if type(marked) == 'table' then return marked end
  if not write then return nil end
  marked = marked and marked + 0 or 0
  local by = old.grown.to - math.max(old.grown.from, marked)
  by = math.min(by, now + moved.second - into[3])
  if by > 0 then
    local spent = token_bucket({moved.key},
      {'1', moved.second, string.format('%d', by), '4', '1'}, nil, now)
    if type(spent) == 'table' then return spent end
  end
  if old.grown.to > marked then
    redis.call('SET', old.key, string.format('%d', old.grown.to), 'PXAT',
      string.format('%d', math.floor((now + old.grown.lasts) / 1000) + 1000))
  end
  return nil
end

local function carry(old, moved, now, write)
  if old.grown then return grow(old, moved, now, write) end
  if old.block + 0 > 0 and moved.block + 0 > 0 then
    local until_us
    if old.given then
      until_us = old.given.block > 0 and now + old.given.block or nil
    else
      until_us = beside_number(old.block_key, 'block')
      if type(until_us) == 'table' then return until_us end
    end
    local held = beside_number(moved.block_key, 'block')
    if type(held) == 'table' then return held end
    until_us = until_us and until_us + 0
    if write and until_us and until_us > now and not (held and held + 0 >= until_us) then
      redis.call('SET', moved.block_key, string.format('%d', until_us), 'PXAT',
        string.format('%d', math.floor((until_us + 999) / 1000)))
    end
  end
  local bucket = scripts[old.strategy + 0] == token_bucket and not old.block_only
  if bucket and scripts[moved.strategy + 0] == token_bucket then
    local from = old.given or level(old, now)
    if from.err then return from end
    local into = level(moved, now)
    if into.err then return into end
    if not write then return nil end
    local at = into[5]
    local owed = old.given and old.given.debt or math.max(from[3] - at, 0)
    local time = carried_time(owed, math.max(into[3] - at, 0))
    if time > 0 then
      local spent = token_bucket({moved.key},
        {'1', moved.second, string.format('%d', time), '4', '1'}, nil, now)
      if type(spent) == 'table' then return spent end
    end
  end
  return nil
end
