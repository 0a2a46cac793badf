-- Fixed window, the same rules as `FixedWindow::decide` in fixed_window.rs (beside this
-- file), in microseconds.
-- Windows are aligned to multiples of the window since the epoch; time is Redis' own (TIME and
-- its expiry clock), so every client agrees on the boundaries whatever its local clock says.
--
-- KEYS[1]: the limiter key. Two state formats, chosen by the window (which is part of the key,
--          so one key only ever holds one of them):
--          - a window of whole milliseconds: the integer count of the current window, expiring
--            (PEXPIREAT) at the window's last millisecond, end - 1 ms. Redis drops a key once
--            its millisecond clock is past the expiry, so the key lives exactly until the
--            window ends and its TTL tells which window the count belongs to: the count is
--            always the current window's, with no time read on the hot path. The expiry is
--            set on the window's first hit only. A value that is not a count (a decimal
--            integer from 0 to MAX_CAPACITY, see prelude.lua), or an integer key without an
--            expiry (not written here), is the wrong shape. A count expiring off this
--            window's boundaries is another window's (a bare store key asked under two
--            quotas): refused until it ends, see `foreign` below;
--          - any other window: the string "F<window start>:<window>:<count>", expiring at the
--            end of the window rounded up to the millisecond (it may outlive its window by
--            less than a millisecond, so the start it holds tells whether it still counts).
--            A start off the window's boundaries or past MAX_NOW, a window other than the
--            key's, or a count above MAX_CAPACITY is the wrong shape: no store writes it (the
--            key names the window), and read it would be an old window's, a fresh budget. (A
--            count of 0 with a start is a window whose calls were all given back, as the
--            memory store's refunds leave it: `FixedWindow::refund`.)
--          Anything else there (another type or shape, e.g. the string format of an earlier
--          version under a whole-millisecond window) gets an error reply, see prelude.lua.
-- ARGV[1]: window, in microseconds
-- ARGV[2]: capacity (limit + burst), at least 1
-- ARGV[3]: cost, from 1 to the capacity; 0 (with ARGV[4] = 0) looks at the level, see
--          `algorithm::level`
-- ARGV[4]: 1 to record an admitted call, 0 to only look (nothing is written)
-- ARGV[5]: ignored (the other strategies' scripts read it: 1 asks them for the full reply,
--          which this script always gives). A call that records under a window of whole
--          milliseconds is fixed_window_hot.lua's, a script of its own, when the store wants
--          no full reply.
-- `fell` (true or nil): set only by fixed_window_hot.lua, which calls this script as a function
--          on state of the wrong shape to get its error reply.
-- Returns: the full reply {allowed (1 or 0), remaining, reset_at, retry_after (-1 when
--          allowed), now}, times in microseconds since the epoch, retry_after in microseconds,
--          `now` Redis' TIME. Or the RATELIMIT_STATE error reply.
-- Time: never decided before the recorded window (now = max(TIME, recorded start)), as in
--       Rust. After Redis' clock stepped forward (and back, or on a failover to a server whose
--       clock is behind), the key holds a window that has not begun: calls are counted in that
--       window until the clock reaches it, never in an earlier one that would start from 0, so
--       the step moves the key's window ahead and no window is counted twice. retry_after is
--       measured from TIME (the same as Rust's whenever TIME has not gone back), so a refused
--       caller is told how long it really waits.
-- The key expires when its window ends: no counter outlives its window.

-- `key`, `cost`, `commit`, `time`, `idiv` and `unexpected` come from prelude.lua, loaded before
-- this file; `fell` is declared in front of both (scripts.rs).
local window = ARGV[1] + 0
local capacity = ARGV[2] + 0

-- The full reply for a call decided at `at` (TIME is `now`) in the window ending at `stop`,
-- which held `count` before the call.
local function full(now, at, stop, count)
  if count + cost <= capacity then
    -- A look (cost 0) at an unused window: full now, as in Rust.
    local reset_at = stop
    if count + cost == 0 then reset_at = at end
    return {1, capacity - count - cost, reset_at, -1, now}
  end
  return {0, math.max(capacity - count, 0), stop, stop - now, now}
end

if window % 1000 == 0 then
  local SHAPE = 'a fixed window (an integer count expiring at its window\'s last millisecond)'
  -- The hot path (fixed_window_hot.lua, a script of its own) calls this one only on state
  -- of the wrong shape, which it has seen and left as it was.
  if fell then return unexpected(SHAPE) end

  local now = time(run_now)
  -- own_end: when the key ends, before an expiry up to an eighth of a window past a boundary
  -- is read as that boundary's (below).
  local count, stop, own_end = 0, nil, nil
  local raw = redis.pcall('GET', key)
  if type(raw) == 'table' then return unexpected(SHAPE) end -- WRONGTYPE
  if raw then
    count = decimal(raw, MAX_CAPACITY)
    if not count then return unexpected(SHAPE) end
    -- The absolute expiry: a TTL is measured at the instant PTTL runs, which may be a
    -- millisecond past the TIME read above.
    local expiry = redis.pcall('PEXPIRETIME', key)
    if type(expiry) == 'table' then -- Redis 6.2 has no PEXPIRETIME: read PTTL and TIME again
      local ttl = redis.call('PTTL', key)
      expiry = ttl < 0 and ttl or idiv(time(run_now), 1000) + ttl
    end
    if expiry < 0 then return unexpected(SHAPE) end
    stop = (expiry + 1) * 1000
    own_end = stop
    -- Up to an eighth of the window (50 ms at most) past a boundary is that boundary's
    -- window: a MIGRATE or RESTORE gives a relative TTL, later by the time it took (as
    -- fixed_window_hot.lua reads it).
    local off = stop % window
    if off > 0 and off <= math.min(50000, idiv(window - 1000, 8000) * 1000) then
      stop = stop - off
    end
  end
  -- A count expiring off this window's boundaries was written under another window (a bare
  -- store key asked under two quotas): counted here, this window's calls would end with it
  -- (a day's limit of 10 admitted 19 on a key a one-second window wrote). Refused until it
  -- ends, as the memory store's `algorithm::foreign`; a penalty is kept at least until this
  -- window's end, a reward gives nothing back (the count is not this window's); a count of
  -- 0 has nothing of its own to count, and the key is this window's from its next write.
  local foreign = raw and stop % window ~= 0
  -- A count read onto a boundary that has passed while the key still lives (TIME between
  -- the two) is a RESTORE's lag, or a shorter window's count ending less than an eighth of
  -- this window past that boundary (a bare key asked under two windows: a 40 ms window's 10,
  -- read so by a 400 ms window as an ended window's and written over, admitted 9 more in its
  -- 40 ms). Which one cannot be told: refused until the key ends (50 ms at most), never
  -- overwritten.
  if raw and stop <= now and own_end > now then stop, foreign = own_end, true end
  if foreign and count == 0 then raw, foreign = nil, false end
  if refunding then
    -- The count of the spend's window (which ends at `spent`) while that window lasts.
    if not raw or stop ~= spent or now >= spent or count < cost or cost == 0 then return 0 end
    if giving then redis.call('DECRBY', key, cost) end
    return 1
  end
  if adjusting then
    -- `FixedWindow::adjust`: in the window of TIME, never before the recorded one (a key
    -- that has not expired holds it): a penalty adds to its count (up to MAX_CAPACITY), a
    -- reward takes from it.
    if raw and stop <= now then raw, count, foreign = nil, 0, false end
    if foreign then
      if not penalty then return 0 end
      local next_count = math.min(count + cost, MAX_CAPACITY)
      local last = math.max(stop, (idiv(now, window) + 1) * window) / 1000 - 1
      redis.call('SET', key, string.format('%d', next_count), 'PXAT', string.format('%d', last))
      return next_count - count
    end
    local next_count = count - math.min(cost, count)
    if penalty then next_count = math.min(count + cost, MAX_CAPACITY) end
    if next_count ~= count then
      if raw then
        redis.call('INCRBY', key, string.format('%d', next_count - count))
      else
        stop = (idiv(now, window) + 1) * window
        redis.call('SET', key, string.format('%d', next_count), 'PXAT',
          string.format('%d', stop / 1000 - 1))
      end
    end
    return math.abs(next_count - count)
  end
  if raw and stop <= now then
    -- A window that ended after this script began (Redis looks keys up at the script's
    -- start, TIME is read later): its count no longer counts, as in Rust.
    raw, count, foreign = nil, 0, false
  end
  if foreign then return {0, 0, stop, stop - now, now} end
  if not raw then
    stop = (idiv(now, window) + 1) * window
  end
  if commit and count + cost <= capacity then
    if raw then
      redis.call('INCRBY', key, cost)
    else
      redis.call('SET', key, cost, 'PXAT', stop / 1000 - 1)
    end
  end
  return full(now, math.max(now, stop - window), stop, count)
end

local now = time(run_now)
local SHAPE = 'a fixed window ("F<start>:<window>:<count>")'
local at = now
local start
local count = 0
-- The prefix of the stored value when it was written for this very window (and so already
-- expires at its end): then the count is rewritten and the expiry kept, the cheap path.
local same
local raw = redis.pcall('GET', key)
if type(raw) == 'table' then return unexpected(SHAPE) end -- WRONGTYPE
if raw then
  local head, s, w, c = string.match(raw, '^(F(%d+):(%d+):)(%d+)$')
  if s then s, w, c = digits(s, MAX_NOW), digits(w, MAX_EXACT), digits(c, MAX_CAPACITY) end
  if not (s and c and w == window) or s % window ~= 0 then
    return unexpected(SHAPE)
  end
  if refunding then
    -- As above: the count of the spend's window while it lasts; an emptied window keeps its
    -- start.
    if s + window ~= spent or now >= spent or c < cost or cost == 0 then return 0 end
    if giving then redis.call('SET', key, head .. (c - cost), 'KEEPTTL') end
    return 1
  end
  if s > at then at = s end
  start = idiv(at, window) * window
  if s == start then
    count = c
    same = head
  end
else
  if refunding then return 0 end
  start = idiv(at, window) * window
end
local stop = start + window

if adjusting then
  -- As above, in this format: an emptied window keeps its start.
  local next_count = count - math.min(cost, count)
  if penalty then next_count = math.min(count + cost, MAX_CAPACITY) end
  if next_count ~= count then
    if same then
      redis.call('SET', key, same .. next_count, 'KEEPTTL')
    else
      local value = string.format('F%d:%d:%d', start, window, next_count)
      redis.call('SET', key, value, 'PXAT', idiv(stop + 999, 1000))
    end
  end
  return math.abs(next_count - count)
end

if commit and count + cost <= capacity then
  if same then
    redis.call('SET', key, same .. (count + cost), 'KEEPTTL')
  else
    local value = string.format('F%d:%d:%d', start, window, count + cost)
    redis.call('SET', key, value, 'PXAT', idiv(stop + 999, 1000))
  end
end
return full(now, at, stop, count)
