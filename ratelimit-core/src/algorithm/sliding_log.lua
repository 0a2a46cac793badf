-- Sliding window log, the same rules as `SlidingLog::decide` in sliding_log.rs beside this file, in
-- microseconds: exact, never more than the capacity in any rolling window.
--
-- KEYS[1]: the limiter key; a list with one entry per admitted call, whatever its cost,
--          newest first (LPUSH). An entry is "<time>:<total>:<age>:<used>", then on a bare key
--          "/<window>": the time it was admitted, the sum of the costs admitted on this key up
--          to and including it, and, as they were when the entry was pushed, how long before
--          it the oldest live entry was admitted and the units in the window with its own;
--          then the window the log counts by (see "Whose log" below). A hit at t counts while
--          t + window > now.
--          The live entries are the newest ones, and an admitted call drops the others: so
--          while the oldest entry the newest one names is live, the units in the window are
--          the newest entry's `used`, read from one entry however many entries or units there
--          are; once it has left, the units before the oldest live entry are the total of the
--          newest entry that left. The total restarts from 0 when no hit is left in the window;
--          it stays exact while below 2^53 (an error reply beyond, never a wrong count). An
--          entry of the first four fields alone names no window (a key of one window's, or
--          any of the previous version's, which named none). Another type (the sorted
--          set of earlier versions among them), an entry read that is not of these shapes (the
--          five-field entries "<time>:<total>:<cost>:<oldest>:<base>" of earlier versions
--          among them), out of order or out of bounds (a time past MAX_NOW, units past
--          MAX_CAPACITY, a window of 0 or past MAX_WINDOW, an oldest live entry its window or
--          more before it), gets an error reply, see prelude.lua.
-- Whose log: the window the newest entry names is the one of the last quota that spent on
--          it (a penalty under another window: the longer of the two), as the memory store
--          keeps it beside its log (`LockedCell`). Asked under another window (a bare store
--          key asked under two quotas), the log is decided by `algorithm::written_elsewhere`:
--          while it counts by its own window (until its newest entry plus that window) it is
--          refused, until then, and a reward or a refund gives nothing back (a penalty is kept
--          by the longer window); after, it is fresh. Read under the call's window instead, a
--          shorter window's call late in a longer one's log dropped entries that window still
--          counted (an hour's 3, a minute's call in the hour's last 30 s, then 2 more in the
--          hour). One string compare per call (the window's text as ARGV[1] sends it). A key
--          of one window (ARGV[5]) is never asked under another (the service's keys name their
--          quota): its entries name a window only on a log that names one (a bare key's asked
--          so too), and its calls cost what they did. A log whose newest entry names none is
--          read by its key's expiry (`kept`, below), as the previous version read every log.
-- ARGV[1]: window, in microseconds
-- ARGV[2]: capacity (limit + burst), at least 1
-- ARGV[3]: cost, from 1 to the capacity; 0 (with ARGV[4] = 0) looks at the level, see
--          `algorithm::level`
-- ARGV[4]: 1 to record an admitted call (and drop the entries that left the window), 0 to
--          only look
-- ARGV[5]: its first bit 1 for the full reply below whatever the call; otherwise a call that
--          records gets the short reply when it is admitted at TIME. Its second bit: a key of
--          one window (see prelude.lua).
-- Expiry: an absolute PEXPIREAT rounded up to the millisecond, one window after the newest
--         entry, so the key never goes before its state stops mattering, whatever instant
--         Redis' expiry clock froze at. Written only when it moves (a call in the same
--         millisecond as the newest entry leaves it as it is, on a key of one window), and
--         never earlier than it is.
-- Time: never decided before the newest hit (now = max(TIME, newest)), as in Rust: after
--       Redis' clock stepped forward and back, the hits it stamped ahead keep counting until
--       that later time plus the window, and new hits are stamped there too (so the log stays
--       in time order), never earlier. retry_after is measured from TIME (the same as Rust's
--       whenever TIME has not gone back), so a refused caller is told how long it really waits.
-- Returns: the full reply {allowed (1 or 0), remaining, reset_at, retry_after (-1 when
--          allowed), now}, times in microseconds since the epoch, retry_after in microseconds,
--          `now` Redis' TIME; or the short reply, one integer: the units in the window with
--          this call's, the call admitted and recorded at TIME (so full again one window
--          after TIME). Or the RATELIMIT_STATE error reply.
-- The newest entry's summary is trusted as it reads (of the right shape and within bounds):
-- a summary written to disagree with the entries under it (which no script writes) is not
-- looked for. Checking it against the list's length and tail on every call doubled Redis'
-- CPU per decision (BENCHMARKS.md, "redis"); and whoever can write such state can as well
-- delete the key.
-- Work per call: O(1) while no entry has left the window (the newest entry alone); else a
-- search from the tail in O(log d) reads for the d entries that left, which an admitted call
-- then drops (so each entry is searched past about once). A refusal adds a binary search
-- over the live entries for its retry time.

-- `key`, `cost`, `commit`, `time`, `idiv` and `unexpected` come from prelude.lua.
local now = time(run_now)
-- The window counted by: this call's, or for a penalty on a longer window's log that one's.
local window = ARGV[1] + 0
local own = window
local capacity = ARGV[2] + 0
local MAX_TOTAL = 9007199254740992 -- 2^53
-- What an unreadable log is answered with: `unexpected(A_LOG)`.
local A_LOG = 'a sliding log (a list of "<time>:<total>:<age>:<used>/<window>", newest first)'

-- An entry's time, total, oldest live time, base (the total before the oldest live entry)
-- and the window it names (its text; nil for four fields alone), or nil when it is not one
-- this script wrote. Each write formats its four numbers with '%d' and
-- adds '/' and the window's text when it names one (ARGV[1] as the store sends it, or the
-- text read from the log): in line where it writes, as a function made on every call costs
-- Redis' CPU. So does each local a function made on every call reads (an upvalue, made and
-- closed with each call: 500-650 of Redis' instructions): the bounds below are written in,
-- prelude.lua's MAX_NOW, MAX_EXACT and MAX_CAPACITY and syntax::MAX_WINDOW (366 days), in
-- microseconds.
local function parse(raw)
  -- One pattern for both shapes (a second match for either cost every call): a slash with
  -- no window after it (`cut`, where it would be, not the end) is no shape. The total and
  -- the units are never 0 (an entry counts its own call), so their pattern is the digits' rule
  -- (prelude.lua: no leading zero) in itself; the time and the age go through `digits`.
  local t, total, age, u, cut, w =
    string.match(raw, '^(%d+):([1-9]%d*):(%d+):([1-9]%d*)()/?(%d*)$')
  if not t then return nil end
  if w == '' then
    if cut <= #raw then return nil end -- '/'
    w = nil
  end
  -- The window it names: this call's for its own text (ARGV[1], as the entries name it: a
  -- string compare) or none.
  local named = own
  if w and w ~= ARGV[1] then
    named = digits(w, 31622400000000) -- MAX_WINDOW
    if not named or named == 0 then return nil end
  end
  t, age, total, u = digits(t, 8070450532247928), digits(age, named - 1), total + 0, u + 0
  -- MAX_NOW, then MAX_EXACT and MAX_CAPACITY
  if not (t and age) or total > 9007199254740991 or u > 4294967295 or u > total or age > t then
    return nil
  end
  return t, total, t - age, total - u, w
end

-- Arguments to redis.call are strings where they can be: Redis prints a number argument with
-- "%.17g", which costs more than the command itself on this path.
local head = redis.pcall('LINDEX', key, '0')
if type(head) == 'table' then return unexpected(A_LOG) end -- WRONGTYPE

if refunding then
  -- That call's entry (admitted at `spent` less the window, of the cost) while it counts, as
  -- `SlidingLog::refund`; the newer entries' totals and summaries lose its units. Read from
  -- the head a chunk at a time: a refund follows its call, so its entry is near the head.
  local t = spent - window
  if not head or cost == 0 or now >= spent then return 0 end
  local chunk, chunk_at = nil, -1
  -- The entry `k` from the head (0 the newest), parsed; nil past the end, false unreadable.
  local function entry(k)
    local c = idiv(k, 64)
    if c ~= chunk_at then
      chunk, chunk_at = redis.call('LRANGE', key, c * 64, c * 64 + 63), c
    end
    local raw = chunk[k - c * 64 + 1]
    if not raw then return nil end
    local et, total, oldest, base, w = parse(raw)
    if not et then return false end
    return {et, total, oldest, base, w}
  end
  -- The oldest live entry the head names, and the total before it: the oldest kept, each
  -- admitted call trimming the list to it. Only on a log of this window (or of none named):
  -- another window's spends are not this one's to give back (`algorithm::written_under`).
  local _, _, first, first_base, w = parse(head)
  if w and w ~= ARGV[1] then return 0 end
  local k = 0
  while true do
    local e = entry(k)
    if e == false then return unexpected(A_LOG) end
    if not e or e[1] < t then return 0 end
    if e[1] == t then
      -- Its units: its total less the next older entry's; the oldest kept, its total less
      -- the head's base when it is the head's oldest live entry (else they cannot be told:
      -- nothing).
      local older = entry(k + 1)
      if older == false then return unexpected(A_LOG) end
      local units = older and e[2] - older[2] or (first == e[1] and e[2] - first_base)
      if units == cost then break end
    end
    k = k + 1
  end
  if not giving then return 1 end
  local removed = entry(k)
  local before = removed[2] - cost -- the total before it
  local newer_time = k > 0 and entry(k - 1)[1]
  for j = 0, k - 1 do
    local e = entry(j)
    local et, total, oldest, base = e[1], e[2] - cost, e[3], e[4]
    if base == before then
      oldest = newer_time -- it was the oldest live entry: the next newer one is
    elseif base > before then
      base = base - cost -- it was before the oldest live entry
    end
    redis.call('LSET', key, j, string.format('%d:%d:%d:%d', et, total, et - oldest, total - base)
      .. (e[5] and '/' .. e[5] or ''))
  end
  local e = k == 0 and entry(1)
  if e and (removed[4] < before or e[5] ~= w) then
    -- The head goes: the next one becomes the head, naming the head's window (the log's,
    -- which a refund leaves as it is), and, when the head was not its own oldest live entry,
    -- with the head's summary (its own may name entries the head's call trimmed).
    if removed[4] < before then e[3], e[4] = removed[3], removed[4] end
    redis.call('LSET', key, 1, string.format('%d:%d:%d:%d', e[1], e[2], e[1] - e[3],
      e[2] - e[4]) .. (w and '/' .. w or ''))
  end
  redis.call('LSET', key, k, 'refunded')
  redis.call('LREM', key, 1, 'refunded')
  return 1
end
local at = now
-- w: the window the newest entry names (its text; nil: none); names: the one this call's
-- entry names, where it names one (see below).
local newest, top, w
local names = ARGV[1]
-- used: the units in the window; base: the total before the oldest live entry, `oldest` its
-- time; dead: how many entries at the tail have left the window (all of them when `used`
-- is 0); passed: another window's log that counts no more, fresh here.
local used, base, oldest, dead, passed = 0, 0, nil, 0, false
if head then
  newest, top, oldest, base, w = parse(head)
  if not newest then return unexpected(A_LOG) end
  if w and w ~= ARGV[1] then
    -- Another window's log (see "Whose log" above): `algorithm::written_elsewhere`.
    local other = w + 0 -- parse read it
    local ends = newest + other
    if now < ends then
      if not adjusting then return {0, 0, ends, ends - now, now} end
      if not penalty then return 0 end
      -- A penalty is kept by the longer window, which then owns the log.
      if other > window then window, names = other, w end
    elseif adjusting and not penalty then
      return 0 -- a reward on a fresh log moves nothing, and writes nothing
    else
      passed = true
    end
  end
  if newest > at then at = newest end
  local from = at - window -- an entry at t is live while t > from
  if passed or newest <= from then
    base, oldest = 0, nil -- none is live
  elseif oldest <= from then
    -- Some have left: the oldest live entry is searched for from the tail (1 the oldest),
    -- doubling the step `k` from the tail, then halving the gap. Each entry read and parsed
    -- once (`times`, `totals`: checked against the newest); the two oldest in one LRANGE,
    -- which every search reads (an admitted call drops what left, so the next one finds one
    -- or a few gone). Indices go as strings (see `head` above). In one loop, not a function
    -- made on every call: each local it read would be an upvalue (see `parse`).
    local two = redis.call('LRANGE', key, '-2', '-1') -- the oldest last
    local times, totals = {}, {}
    -- The last `lo` entries are known to have left, entry `hi` from the tail is live (the
    -- newest is); past the list's end, `hi` is its length, the newest, read next.
    local lo, hi, k = 0, nil, 1
    repeat
      if times[k] == nil then
        local raw
        if k > 2 then
          raw = redis.call('LINDEX', key, string.format('%d', -k))
        else
          raw = two[#two + 1 - k]
        end
        if raw then
          local t, total = parse(raw)
          if not t or t > newest or total > top then return unexpected(A_LOG) end
          times[k], totals[k] = t, total
        elseif hi then
          return unexpected(A_LOG)
        end
      end
      local t = times[k]
      if not t then
        hi = redis.call('LLEN', key)
      elseif t > from then
        hi = k
      else
        lo = k
      end
      if not hi then
        k = k * 2
      elseif times[hi] == nil then
        k = hi
      else
        k = idiv(lo + hi, 2)
      end
    until hi and hi - lo <= 1 and times[hi]
    -- The oldest named entry has left and is still in the list (an admitted call drops only
    -- what left before it was pushed), so at least one has left.
    if lo < 1 then return unexpected(A_LOG) end
    dead = lo
    oldest = times[hi]
    local total = totals[lo]
    if oldest <= from then return unexpected(A_LOG) end
    base = total
  end
  if oldest then used = top - base end
end

-- A log whose newest entry names no window, on a bare key (the previous version's, or a key
-- of one window's asked bare), whose entries have left this window (an admitted call would
-- drop them, and a reward) while its key is kept more than a window past the call's time:
-- written under a longer window (a bare store key asked under two quotas), whose calls those
-- entries still count. Dropped, that window admitted its limit again (a day's 10, a call
-- under 1 ms, then 9 more: 19 in a day). Refused until the key ends; a reward gives nothing
-- back and a penalty is an error (it would drop them too). Every expiry written here is one
-- window after the newest entry then, rounded up to the millisecond, so never more than a
-- window past the call's time `at` (a refund of the newest entry leaves it, later than the
-- entries left need); up to an eighth of the window (50 ms at most) more is still this
-- window's, as a MIGRATE or RESTORE gives a relative TTL, later by the time it took. A call
-- this lets write on such a log names its window in its entry if the log is not kept longer
-- (every entry under it stops counting, whichever window wrote it, within that eighth after
-- this window from the call), from then on decided as "Whose log" says; on one kept longer
-- (its entries all live here) it is decided on the log as it reads and names none. What this
-- still lets by, on such logs alone: a longer window's entries dropped by such a call, which
-- the longer window's calls are refused on until this window from the call has passed, still
-- counted up to that eighth (and a millisecond) after it. One call more (PEXPIRETIME), on
-- such logs alone.
local kept = false -- the key's end (microseconds) when such a log is kept longer
if head and not w and not one_window then
  local ends = redis.pcall('PEXPIRETIME', key)
  if type(ends) == 'table' then -- Redis 6.2 has no PEXPIRETIME: PTTL, from TIME
    local ttl = redis.call('PTTL', key)
    ends = ttl < 0 and -1 or idiv(now, 1000) + ttl + 1
  end
  -- No expiry (-1): not written here, counted as it reads.
  if ends >= 0 and ends > idiv(at + window + 999, 1000) + math.min(50, idiv(window, 8000)) then
    kept = ends * 1000
  end
  if kept and (used == 0 or dead > 0) then
    if adjusting and penalty then
      return unexpected('a sliding log this window keeps (another window keeps this one)')
    end
    if adjusting then return 0 end
    return {0, 0, kept, math.max(kept - now, 1), now}
  end
end

if adjusting and not penalty then
  -- `SlidingLog::adjust`'s reward: the entries that left the window dropped (the key, when
  -- none is live), then taken from the newest entries first. Every entry left is live: the
  -- oldest is the one the main path found (`oldest`, the total before it `base`), which
  -- the head rewritten names, as every head must name an entry the list holds; and it names
  -- the log's window (`w`: a reward leaves it as it is, as the memory store's).
  if not head or cost == 0 then return 0 end
  if used == 0 then
    redis.call('DEL', key)
    return 0
  end
  -- The live entries the walk below reads (the newest down to the one after the last it
  -- takes from), read first: one not of the shape, or not below the newer one's total, is the
  -- state error before anything is written. Met by the walk, a reward of 3 took the newest
  -- entry's unit and then replied the error (lua_log_tags).
  local live = dead > 0 and redis.call('LLEN', key) - dead
  local need, k, total0 = cost, 0, top
  while need > 0 and (not live or k + 1 < live) do
    local raw = redis.call('LINDEX', key, string.format('%d', k + 1))
    if not raw then break end
    local _, total1 = parse(raw)
    if not total1 or total1 >= total0 then return unexpected(A_LOG) end
    need, k, total0 = need - math.min(need, total0 - total1), k + 1, total1
  end
  if need > 0 and total0 <= base then return unexpected(A_LOG) end
  if dead > 0 then
    redis.call('LTRIM', key, 0, -1 - dead)
  end
  local left, suffix = cost, w and '/' .. w or ''
  while left > 0 do
    local t0, total0 = parse(redis.call('LINDEX', key, '0') or '')
    if not t0 then break end
    local next_raw = redis.call('LINDEX', key, '1')
    local units, t1, total1 = total0 - base, nil, nil
    if next_raw then
      t1, total1 = parse(next_raw)
      if not t1 then return unexpected(A_LOG) end
      units = total0 - total1
    end
    local taken = math.min(left, units)
    if taken == units then
      redis.call('LPOP', key)
      if next_raw then
        redis.call('LSET', key, '0', string.format('%d:%d:%d:%d', t1, total1, t1 - oldest,
          total1 - base) .. suffix)
      end
    else
      local total = total0 - taken
      redis.call('LSET', key, '0', string.format('%d:%d:%d:%d', t0, total, t0 - oldest,
        total - base) .. suffix)
    end
    left = left - taken
  end
  return cost - left
end
if adjusting then
  -- A penalty: an entry of its own at `at`, recorded whatever the capacity, its units kept
  -- within MAX_CAPACITY in the window, as `SlidingLog::adjust`.
  cost = math.min(cost, MAX_CAPACITY - used)
  if cost == 0 then return 0 end
end

if adjusting or used + cost <= capacity then
  if commit or adjusting then
    -- Continue the running total while a hit is live, else start again from 0.
    local total = (used > 0 and top or 0) + cost
    if total >= MAX_TOTAL then
      return redis.error_reply('RATELIMIT_STATE the sliding log\'s running total reached 2^53')
    end
    -- The oldest live entry is this one when none was. It names its window (see "Whose
    -- log") on a bare key, but on a log named by none whose live entries it keeps and which
    -- is kept longer than this window keeps it (`kept`, above); on a key of one window, only
    -- on a log that names one (a bare key's asked so too): such a key is never asked under
    -- another window (the service's keys name their quota), and its calls write what they
    -- wrote before. LPUSH first: Redis checks maxmemory before a script's first write only,
    -- and a full noeviction server must refuse this one (the trim below only removes).
    local entry = string.format('%d:%d:%d:%d', at, total, at - (oldest or at), used + cost)
    if not kept and (w or not one_window) then entry = entry .. '/' .. names end
    redis.call('LPUSH', key, entry)
    if used == 0 and head then
      redis.call('LTRIM', key, '0', '0') -- nothing was live
    elseif dead > 0 then
      redis.call('LTRIM', key, '0', dead == 1 and '-2' or string.format('%d', -1 - dead))
    end
    local expiry = idiv(at + window + 999, 1000)
    if not head then
      redis.call('PEXPIREAT', key, string.format('%d', expiry))
    elseif passed or idiv(newest + window + 999, 1000) ~= expiry
        or not (one_window or w == ARGV[1]) then
      -- A bare key's call writes (GT) even in its newest entry's millisecond unless that
      -- entry names this call's window: it may be a shorter window's, or name none, whose
      -- expiry the key keeps (a minute's call in a second's millisecond left the second's,
      -- and the minute admitted its 4 again a second later); and so does a call on another
      -- window's log that has passed (its newest entry is that window's). One that names
      -- this window was written by a call under it, which set the key's expiry to at least
      -- this one (GT, below), as did a call before it where a refund or a reward moved the
      -- newest entry back; and an expiry is never moved earlier here.
      -- Never earlier than it is: under one window the expiry only moves later (`at` never
      -- goes back), and under two a shorter window's call moved it before a longer one's
      -- entries stopped counting, which went with the key (a 200 ms window of 3 admitted 3
      -- more 30 ms in: probes_two_windows). GT is Redis 7's; 6.2 compares the TTL.
      local moved = redis.pcall('PEXPIREAT', key, string.format('%d', expiry), 'GT')
      if type(moved) == 'table' then
        local ttl = redis.call('PTTL', key)
        if ttl < 0 or idiv(now, 1000) + ttl < expiry then
          redis.call('PEXPIREAT', key, string.format('%d', expiry))
        end
      end
    end
    if adjusting then return cost end
    if at == now and short then return used + cost end
  end
  -- Full again one window after this call; for a look (cost 0), one window after the newest
  -- live hit, or now when none is live, as in Rust.
  local reset_at = at + window
  if cost == 0 then
    reset_at = used > 0 and newest + window or at
  end
  return {1, capacity - used - cost, reset_at, -1, now}
end

-- Refused: the call fits once the oldest live hits holding (used + cost - capacity) units
-- have left, i.e. at the oldest live entry whose total reaches base + that. Totals grow from
-- the tail to the head, so a binary search over the live entries (from the tail: dead + 1,
-- the oldest live, to the list's length, the newest) finds it.
local target = base + used + cost - capacity
local lo, hi = dead + 1, redis.call('LLEN', key)
local function total_at(k)
  local t, total = parse(redis.call('LINDEX', key, string.format('%d', -k)) or '')
  if not t or t > newest or total > top then return nil end
  return total, t
end
while lo < hi do
  local mid = idiv(lo + hi, 2)
  local total = total_at(mid)
  if not total then return unexpected(A_LOG) end
  if total >= target then hi = mid else lo = mid + 1 end
end
local _, retry_at = total_at(lo)
if not retry_at then return unexpected(A_LOG) end
return {0, math.max(capacity - used, 0), newest + window, retry_at + window - now, now}
