-- Sliding window log, the same rules as `SlidingLog::decide` in src/algorithm.rs, in
-- microseconds: exact, never more than the capacity in any rolling window.
--
-- KEYS[1]: the limiter key; a sorted set with one member per unit of cost admitted, scored
--          by the time it was admitted. A hit at t counts while t + window > now.
--          Members are "<time>-<n>", n counting the members already at that time, so hits in
--          the same microsecond (from any number of clients) are all kept.
-- ARGV[1]: window, in microseconds
-- ARGV[2]: capacity (limit + burst), at least 1
-- ARGV[3]: cost, from 1 to the capacity
-- ARGV[4]: 1 to record an admitted call (and drop expired members), 0 to only look
-- Expiry: an absolute PXAT/PEXPIREAT rounded up to the millisecond, so the key never goes
--         before its state stops mattering, whatever instant Redis' expiry clock froze at.
-- Returns: {allowed (1 or 0), remaining, reset_at, retry_after (-1 when allowed), now};
--          times in microseconds since the epoch, retry_after in microseconds.
-- The key expires one window after its newest member.

-- `key`, `cost`, `commit`, `now` and `idiv` come from prelude.lua, loaded before this file.
local window = ARGV[1] + 0
local capacity = ARGV[2] + 0
local oldest_live = '(' .. string.format('%d', now - window)

-- Another strategy's state (a string) under this key counts as a fresh key.
local used = redis.pcall('ZCOUNT', key, oldest_live, '+inf')
if type(used) ~= 'number' then
  used = 0
  if commit then redis.call('DEL', key) end
elseif commit then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now - window))
end

if used + cost <= capacity then
  if commit then
    local stamp = string.format('%d', now)
    local n = redis.call('ZCOUNT', key, stamp, stamp)
    local args = {}
    for i = 1, cost do
      args[#args + 1] = stamp
      args[#args + 1] = stamp .. '-' .. string.format('%d', n + i)
      if #args >= 1000 or i == cost then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    redis.call('PEXPIREAT', key, idiv(now + window + 999, 1000))
  end
  return {1, capacity - used - cost, now + window, -1, now}
end

-- Refused: the call fits once the (used + cost - capacity)-th oldest live unit has left.
local need = used + cost - capacity
local nth = redis.call('ZRANGEBYSCORE', key, oldest_live, '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
local retry_at = nth[2] + window
return {0, math.max(capacity - used, 0), newest[2] + window, retry_at - now, now}
