-- Carrying a state a reload moved a limit away from (another key: another window, tier name
-- or key prefix) into the moved limit's state, for lua/stacked.lua, which is loaded behind
-- this file (the strategies' scripts as functions, `scripts` and lua/beside.lua in front of
-- it): `Stacked::carried`, `Carry` in src/store/stacked.rs. What the old state holds that
-- outlasts its window (a token bucket's debt, a penalty's, a block) is written into the moved
-- state before the call is decided, so the moved state is never fresher than the old one.
--
-- Defines: carried_time(debt_o, debt_n): the rule of `Carry::debt`, in microseconds (below);
--          pending_of(k), added(...), write_pending(): the pending records and an
--          addition (see `grow`);
--          late(given, now): a read past its wait (see there);
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

-- The pending record at `k` (see `grow` below): {from, id, past, erased, slack, since, merged,
-- own} (`from` the end a call read, a number; `id` its id, as the call's argument wrote it;
-- `past` the time, on this node's clock, after which its read after has come or never will;
-- `erased` the time resets and give-backs had erased from the old bucket at its read,
-- lua/level.lua; `slack` and `since` the call's ticket, see `tickets` below, with what a
-- record it replaced stood for merged in; `merged` the id of the call whose record that was
-- ('0': none, or one that cannot be told apart), whose read after gives the call back its
-- `own` slack. The last four nil in a record of four parts, the last six in one of two, as
-- written before they were kept: never past, erased unknown, no slack and every addition
-- made before its script), nil without one, or the RATELIMIT_STATE error reply for
-- anything else there.
local function pending_of(k)
  local s = redis.pcall('GET', k)
  if not s then return nil end
  local parts = {}
  if type(s) == 'string' then
    for part in string.gmatch(s .. ':', '([^:]*):') do parts[#parts + 1] = part end
  end
  local ok = #parts == 2 or #parts == 4 or #parts == 8
  for i, part in ipairs(parts) do
    -- The end, the id and the past above 0; the others 0 or above, no leading zero.
    local number = string.find(part, '^[1-9]%d*$') or (i > 3 and part == '0')
    ok = ok and number and part + 0 <= 9007199254740991
  end
  if not ok then
    return redis.error_reply('RATELIMIT_STATE the pending key holds something that is not '
      .. 'a pending record')
  end
  local n = function(i) return parts[i] and parts[i] + 0 end
  return {from = n(1), id = parts[2], past = n(3), erased = n(4), slack = n(5), since = n(6),
    merged = parts[7], own = n(8)}
end

-- The pending records (b) of the carries made (`grow`): {key, record, expiry in milliseconds},
-- written by `write_pending` once the call is admitted (a refusal spends nothing, so misses
-- nothing: the record it would replace stands).
local pending_records = {}

local function write_pending()
  for _, r in ipairs(pending_records) do
    redis.call('SET', r[1], r[2], 'PXAT', r[3])
  end
end

-- The tickets of the carries made from a read in another slot by a call that reads again
-- (`old.given.pending` not '0'), in order: {slack, added}, appended to the stacked script's
-- reply (lua/stacked.lua) for the call's read after (`Given::Grown`), and kept in its pending
-- record. `slack`: how much longer the moved bucket owed than the debt carried, at the
-- carry (its end then `slack` past the carried end: what the old state may have grown by
-- between the call's read and its script that the moved bucket held all the same, in
-- microseconds); `added`: the total added to the moved bucket then (the added key, see
-- `added` below; 0: none). Of what the old state grew by since the call's read, the call
-- then owes the moved bucket only what exceeds its slack and what was added after its
-- script (by anyone, for any growth): the moved bucket's end is then, at the call's script
-- and after, past the carried end by at least the growth, which one script would have
-- carried (the old end at the script, or later, no earlier than the one read after it).
local tickets = {}

-- Adds to the moved token bucket (`into`: a level of it at `now`) what the old state's end grew
-- by (`grew`, microseconds) since the read of a call of ticket `slack`, `since` (see
-- `tickets`: `since` nil, a call of a record written before tickets: nothing subtracted),
-- less its slack and what the added key at `total_key` (holding `total`, 0: none) says was
-- added since its script; never past a bucket spent from `now`. The added key then holds
-- its total and what this addition owed (whether or not capped), expiring no earlier than
-- `lasts` after `now` and a second (see `grow`). The error reply of the moved state, if any.
local function added(moved, into, total_key, total, grew, slack, since, lasts, now)
  local owed = grew - slack - math.max(total - (since or total), 0)
  local by = math.min(owed, now + moved.second - into[3])
  if by > 0 then
    local spent = token_bucket({moved.key},
      {'1', moved.second, string.format('%d', by), '4', '1'}, nil, now)
    if type(spent) == 'table' then return spent end
  end
  if owed > 0 then
    local until_ms = math.floor((now + lasts) / 1000) + 1000
    until_ms = math.max(until_ms, expiry(total_key))
    redis.call('SET', total_key, string.format('%d', math.min(total + owed, 4503599627370496)),
      'PXAT', string.format('%d', until_ms))
  end
  return nil
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
-- another slot than the moved one, which no script reads beside it): {debt, block, read_end,
-- erased, pending, wait, began}, the time its bucket owes and what is left of its block, in
-- microseconds from that script's TIME, which came first; each counted from `now` here
-- (later), so carried no shorter; the end it was spent to on its node's clock (when it will
-- be full again, or the end a reset erased there where that is later: `Read::end` in
-- src/store/redis/stacked.rs), that erased end (0: none), the id of the call when that call
-- reads it again after this script ('0': it will not), the wait within which it does, and
-- this node's TIME taken before that read (`moved_clock` in src/store/redis/across_slots.rs:
-- see `late` below). Its key and
-- block key are then the added key and the pending record beside the moved state (see
-- `grow` below).
-- `old` may instead be `grown` (see `grow` below), its keys those two.
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
-- by the next carry). Added to the moved token bucket (a penalty of that time: the carry's
-- rule takes only the excess of one debt over the other, which a spend on the moved state
-- already covered) but for the call's ticket (`tickets`: its slack, and what the added key
-- `old.key` says was added since its script, by any call, for any growth), so that calls
-- that read before the same writes add them once; and never past a bucket spent from `now`
-- (what admitted spends leave at most: a later one the old state's own debt holds, which
-- every later call carries). The added key then holds its total and this addition,
-- expiring after that debt has run out (`lasts`, plus a second for the nodes' clocks).
-- Why it fails closed: one script carries the old end at the script, E; this call carried
-- the end it read, C, and the moved bucket then ended at C + slack; what was added after
-- the script moves the end as late or later than it would have then (a spend after it
-- starts from the end). Its end so reaches C + slack + what was added after the script, at
-- least C + grown: no earlier than E (the end read after the script is no earlier than E's:
-- resets and give-backs counted in it, it never moves back).
-- The call's pending record (`old.block_key`, see below) is then done with: deleted
-- when it is still the call's own (`old.grown.pending`, its id), which no later call's script
-- overwrote; run for that even when nothing grew (`from` = `to`).
--
-- The pending record: a call whose script ran and whose read after never did (its task
-- dropped with a runtime shut down) left what it missed unadded, and the next carry covered
-- its spend. So the script of a call that will read again (`old.given.pending`, its id, not
-- 0) writes beside the moved state, before it carries the debt read: (a) where a record is
-- left (a call whose read after has not yet come, or never will), what the old state's end
-- grew by since it (from the record's end to the end this call read) is added as `grow`
-- adds (by the record's ticket, the same added key, the same cap); (b) the record, this
-- call's read end and id, when its read after has come or never will, the time erased at
-- its read and its ticket, in place of any other: a record whose call may still read again
-- has its ticket merged in (the smaller slack, counted from this call's read), so that this
-- call's read after (whose slack is then the record's while it stands) or the next script
-- adds what that call may have missed, until that call's own read after gives this one
-- its own slack back (tried without: a call whose read after never came, its record
-- replaced by one whose slack held its own growth, was covered by nobody: 9 owed where
-- one server owes 10); once the call is
-- admitted (`write_pending`, by lua/stacked.lua). A read
-- after deletes the record only while it is its own: a record of a later script stands
-- until its own read after, or the next script, adds what it stands for. Every addition
-- counts those made after the script it is for: each part of the old state's growth
-- added once, whichever call adds it. An end read counts the time resets erased from
-- the old bucket while it was carried (lua/level.lua), so it never moves back: read full
-- after a reset by a pod the reload has not reached, the spends between the record's read
-- and the reset were lost (9 admitted after where one server leaves 4:
-- `probe_a_standing_record_then_the_old_state_reset`, carries/). From a read of a full old
-- bucket (its end then the time read, not what was spent: as `grown_since` in
-- src/store/redis/across_slots.rs) the whole time from the record's end is added all the
-- same, but for the record's ticket: what was spent between the record's read and its
-- script may have refilled by the time read (a bucket refills between two calls, and
-- within one whose read after comes late), and nothing else tells of it (added only when
-- resets erased more since, or past the record's wait, a record's 3 s spent on a full old
-- bucket refilled before the next read were lost: 7 s owed where one server owes 10 s,
-- `probe87_a_lost_read_after_its_growth_refilled_before_the_next_read`, lua_carry/). The
-- time between two overlapping calls' reads so read as grown, which added whole kept a
-- moved bucket under steady calls from refilling, is within the record's slack (the moved
-- bucket then owes at least the calls spent since): added once, when the moved bucket
-- owed nothing past the debt carried. The record expires a full moved bucket (what one
-- addition adds at most) after the end read or its wait, whichever is later: the next
-- carrying spend comes before that whenever calls keep coming, and no record then is left
-- behind by a key gone quiet.
local function grow(old, moved, now, write)
  if scripts[moved.strategy + 0] ~= token_bucket then return nil end
  local into = level(moved, now)
  if into.err then return into end
  local marked = beside_number(old.key, 'mark')
  if type(marked) == 'table' then return marked end
  local record = pending_of(old.block_key)
  if record and record.err then return record end
  if not write then return nil end
  marked = marked and marked + 0 or 0
  local grown = old.grown
  -- Its own record standing, with what a record it replaced stood for merged in: that too
  -- (its call's read after has not come).
  local own = record and record.id == grown.pending
  local slack = own and math.min(grown.slack, record.slack or 0) or grown.slack
  local err = added(moved, into, old.key, marked, grown.to - grown.from, slack, grown.since,
    grown.lasts, now)
  if err then return err end
  if record and record.id == old.grown.pending then
    redis.call('DEL', old.block_key)
  elseif record and record.merged == old.grown.pending then
    -- The call whose record this one replaced has read again: what it stood for is added,
    -- and the record's call has its own slack back.
    redis.call('SET', old.block_key, string.format('%d:%s:%d:%d:%d:%d:0:%d', record.from,
      record.id, record.past, record.erased, record.own, record.since, record.own), 'KEEPTTL')
  end
  return nil
end

-- The read of a call that reads again (`given`, its pending not '0') past its wait at `now`
-- (its time, `began`: this node's TIME taken before the read, `moved_clock` in
-- src/store/redis/across_slots.rs, and `wait`, the
-- time after which a call's steps have come or never will: `read_after_within` in
-- src/store/redis/across_slots.rs, the one bound its record's `past` and the keys beside the
-- old state are kept by: `level_call` there keeps the erased key for a record written
-- within `wait` of its read): the RATELIMIT_LATE error reply, else nil. A runtime stalled
-- between a call's read and its script (a script sent late runs all the same) carried a
-- read its record then outlived (the erased key it kept expired: the next call's read ended
-- below the record's, and the stalled call's own spend was lost, 3 s owed where one server
-- owes 4 s, `probe82_a_stall_between_read_and_script_outlives_the_erased_key`), or one older
-- than another call's record it read as past (that call's growth held by nobody: 18 s
-- against 19 s, `probe87_a_stall_between_read_and_script_past_another_calls_wait`, both
-- lua_carry/). Refused, with nothing written (every carry is read before any is written,
-- lua/stacked.lua): the call is the store's error (`Error::Timeout`, as the call's own
-- timer would tell it), which the failure policy answers. Reckoned on this node's clock
-- alone, `now` and `began` both: from the read's own time (`read_end - debt - erased`, on
-- the old state's node's clock) an old node behind refused calls that never stalled (1 s +
-- 1 us behind, a wait of 1 s), and one ahead carried a stall past the wait whose record then
-- outlived the erased key (3 s owed where one server owes 4 s, 8 s ahead: both `probe94_`,
-- lua_carry/). `began` is no later than the read, so a read is never younger than reckoned.
-- A `began` past `now` is no reading of this clock before this script (the slot's primary
-- changed since, to one behind; this clock stepped back; garbage): refused too, so a stall
-- longer than its wait is not carried on a clock that far behind (a 9 s stall, 10 s behind,
-- was: 2 s owed where one server owes 3 s, `probe100_a_clock_read_past_the_scripts_now_is_late`,
-- lua_carry/; one less behind than the stall still is: 8 s behind, 3 s against 4 s,
-- `probe100_a_clock_read_ahead_of_the_scripts_carries_a_stall`).
local function late(given, now)
  if given.began > now or given.began + given.wait < now then
    return redis.error_reply('RATELIMIT_LATE a carried state was read longer ago than the '
      .. 'wait of the call that read it')
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
    local pending = old.given and old.given.pending ~= '0'
    local marked, record
    if pending then
      local err = late(old.given, now)
      if err then return err end
      record = pending_of(old.block_key)
      if record and record.err then return record end
      marked = beside_number(old.key, 'mark')
      if type(marked) == 'table' then return marked end
    end
    if not write then return nil end
    if pending then
      -- (a) and (b) of the pending record (see `grow`), before the debt read is carried: what
      -- is added is then in the moved bucket's own debt, which the carry's rule takes first.
      local given = old.given
      -- From a full read too (its end the time read): see `grow`.
      marked = marked and marked + 0 or 0
      if record then
        local grew = given.read_end - record.from
        local err = added(moved, into, old.key, marked, grew, record.slack or 0, record.since,
          given.debt, now)
        if err then return err end
        into = level(moved, now)
        if into.err then return into end
        marked = beside_number(old.key, 'mark')
        marked = marked and marked + 0 or 0
      end
      -- The call's ticket (see `tickets`): the moved bucket's debt past the one carried, and
      -- the total added so far (what was added for the record above included: made before
      -- this call's carry, it is in its slack). A record it replaces whose call may still
      -- read again (not past) and that may never: its ticket merged in, the smaller slack
      -- counted from this call's read (what that record's call is owed, by its ticket, is
      -- then owed by this one's), so this call's read after, or the next script, adds it;
      -- given back by that call's read after (`grow`), which adds it itself.
      local own = math.max(math.max(into[3] - into[5], 0) - given.debt, 0)
      local slack, merged = own, '0'
      -- Past before this call's read (its wait before `now`, within which it read: `late`,
      -- on this node's clock, as `past` is), not only before its script: a pod of a longer
      -- timeout read before the record's script and stalled past that call's wait within
      -- its own, and its ticket's slack held what that call missed (18 s owed where one
      -- server owes 19 s, `probe94_a_long_pods_stall_past_a_short_pods_record`, lua_carry/).
      local past = record and record.past and record.past + given.wait < now
      if record and record.id ~= given.pending and not past then
        local theirs = (record.slack or 0) + record.from - given.read_end
          + marked - (record.since or marked)
        slack = math.max(math.min(own, theirs), 0)
        -- (Theirs alone, or none to give back: a record that merged another's stands for it.)
        if slack < own and (record.merged == nil or record.merged == '0') then
          merged = record.id
        end
      end
      tickets[#tickets + 1] = {own, marked}
      local until_ms = math.floor((now + math.max(given.debt, given.wait) + moved.second) / 1000)
        + 1000
      pending_records[#pending_records + 1] = {old.block_key,
        string.format('%d:%s:%d:%d:%d:%d:%s:%d', given.read_end, given.pending,
          now + given.wait, given.erased, slack, marked, merged, own),
        string.format('%d', until_ms)}
    end
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
