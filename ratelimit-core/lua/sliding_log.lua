-- Sliding window log, the same rules as `SlidingLog::decide` in src/algorithm.rs, in
-- microseconds: exact, never more than the capacity in any rolling window.
--
-- KEYS[1]: the limiter key; a sorted set with one member per admitted call, whatever its cost,
--          scored by the time it was admitted. A hit at t counts while t + window > now.
--          Members are "<total>:<cost>": total is the sum of the costs admitted on this key up
--          to and including this call (16 digits, zero padded, so that the members of one
--          microsecond sort in the order they were admitted), cost the call's own.
--          The units still in the window are total(newest) - total(oldest live) +
--          cost(oldest live): two O(log n) lookups, however many members or units there are.
--          The total restarts from 0 when no hit is left in the window; it stays exact while
--          below 2^53 (an error reply beyond, never a wrong count). Another type, or a member
--          read that is not of this shape, gets an error reply, see prelude.lua.
-- ARGV[1]: window, in microseconds
-- ARGV[2]: capacity (limit + burst), at least 1
-- ARGV[3]: cost, from 1 to the capacity; 0 (with ARGV[4] = 0) looks at the level, see
--          `algorithm::level`
-- ARGV[4]: 1 to record an admitted call (and drop expired members), 0 to only look
-- Expiry: an absolute PXAT/PEXPIREAT rounded up to the millisecond, so the key never goes
--         before its state stops mattering, whatever instant Redis' expiry clock froze at.
-- Time: never decided before the newest hit (now = max(TIME, newest)), as in Rust: after
--       Redis' clock stepped forward and back, the hits it stamped ahead keep counting until
--       that later time plus the window, and new hits are stamped there too (so the log stays
--       in time order), never earlier. retry_after is measured from TIME (the same as Rust's
--       whenever TIME has not gone back), so a refused caller is told how long it really waits.
-- Returns: {allowed (1 or 0), remaining, reset_at, retry_after (-1 when allowed), now}, or the
--          RATELIMIT_STATE error reply; times in microseconds since the epoch, retry_after
--          in microseconds, `now` Redis' TIME.
-- Work per call: O(log n) for n members (n at most the capacity), plus the members it drops;
-- a refusal adds a binary search (O(log^2 n)) for its retry time.
-- The key expires one window after its newest member.

-- `key`, `cost`, `commit`, `time` and `idiv` come from prelude.lua, loaded before this file.
local now = time()
local window = ARGV[1] + 0
local capacity = ARGV[2] + 0
local MEMBER = '^(' .. string.rep('%d', 16) .. '):(%d+)$'
local MAX_TOTAL = 9007199254740992 -- 2^53

local function fmt(n) return string.format('%d', n) end

-- The total and cost a member carries, or nil when it is not one this script wrote.
local function parse(member)
  local total, c = string.match(member, MEMBER)
  if not total then return nil end
  total, c = total + 0, c + 0
  if c < 1 or c > total then return nil end
  return total, c
end

local function unreadable()
  return unexpected('a sliding log (members "<total>:<cost>" scored by time)')
end

local at = now
local used, base, top, newest_at = 0, 0, 0, nil
local newest = redis.pcall('ZRANGE', key, -1, -1, 'WITHSCORES')
if newest.err then return unreadable() end -- WRONGTYPE
if #newest > 0 then
  top = parse(newest[1])
  if not top then return unreadable() end
  newest_at = newest[2] + 0
  if newest_at > at then at = newest_at end
  local first = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(at - window), '+inf', 'LIMIT', 0, 1)
  if #first > 0 then
    local total, c = parse(first[1])
    if not total or total > top then return unreadable() end
    base = total - c
    used = top - base
  end
end

if used + cost <= capacity then
  if commit then
    -- Continue the running total while a hit is live, else start again from 0.
    local total = (used > 0 and top or 0) + cost
    if total >= MAX_TOTAL then
      return redis.error_reply('RATELIMIT_STATE the sliding log\'s running total reached 2^53')
    end
    -- ZADD first: Redis checks maxmemory before a script's first write only, and a full
    -- noeviction server must refuse this one (the removal below never reaches `at`).
    redis.call('ZADD', key, at, string.format('%016d:%d', total, cost))
    redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(at - window))
    redis.call('PEXPIREAT', key, idiv(at + window + 999, 1000))
  end
  -- Full again one window after this call; for a look (cost 0), one window after the newest
  -- live hit, or now when none is live, as in Rust.
  local reset_at = at + window
  if cost == 0 then
    reset_at = used > 0 and newest_at + window or at
  end
  return {1, capacity - used - cost, reset_at, -1, now}
end

-- Refused: the call fits once the oldest live hits holding (used + cost - capacity) units
-- have left, i.e. at the first live member whose total reaches base + that. Totals grow with
-- rank, so a binary search over the live ranks finds it.
local target = base + used + cost - capacity
local lo = redis.call('ZCOUNT', key, '-inf', fmt(at - window))
local hi = redis.call('ZCARD', key) - 1
while lo < hi do
  local mid = idiv(lo + hi, 2)
  local total = parse(redis.call('ZRANGE', key, mid, mid)[1])
  if not total then return unreadable() end
  if total >= target then hi = mid else lo = mid + 1 end
end
local retry_at = redis.call('ZRANGE', key, lo, lo, 'WITHSCORES')[2] + window
return {0, math.max(capacity - used, 0), newest_at + window, retry_at - now, now}
