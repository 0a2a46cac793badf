-- The reload horizon of one key prefix (see src/store/redis/horizon.rs): how long what a
-- fleet's services wrote under the prefix may hold a state a reload moves to another, raised
-- field by field to at least what is asked (a max: never lowered); the record as it was
-- before is returned (the caller tells another service's penalty from its own by it).
--
-- KEYS[1]: the record: a string of eight decimal numbers separated by single spaces: the
--          longest a quota of a call's own outlasts a reload and the longest window of a
--          call's own (nanoseconds: durations, no clock in them); then for the latest bound
--          raised before a penalty, for the latest exact end noted after one, and for the
--          latest bound raised by a service other than the first bound's, when its debt ends
--          (microseconds on this server's clock: TIME, so that pods whose clocks disagree read
--          one instant) and which service raised it (its id). No key is zeros. The second
--          bound is what the first bound's raiser reads of the others' (it never reads its
--          own): with the largest bound alone, a smaller one another service raised lay
--          under it, and where that service's exact end was lost after its penalty, the
--          first bound's raiser read nothing of it (15 admitted against none:
--          probes_horizon_ids_redis). Each is a max: an end raised, never lowered; the
--          second is at most the first and never of its id.
-- ARGV[1..2]: the durations to raise it to (0 where nothing is raised).
-- ARGV[3], ARGV[4]: the penalty bound: microseconds left from now (0: none), the raiser's id
--          (never 0 with a bound): into the first bound where it ends later (the first's
--          former holder, if another service, into the second), else into the second where
--          it ends later and its raiser is not the first's.
-- ARGV[5], ARGV[6]: the exact end, as ARGV[3..4].
-- ARGV[7]: how long, in milliseconds, the record is kept at least from now (0: a read, the
--          expiry left as it is): twice the longest of what is raised, so that a state
--          written with it holds nothing once the record expires, the raising service raising
--          it again (and so keeping it) at its first write past half of that. Never shortened:
--          every key of the store expires.
-- ARGV[8], ARGV[9]: the most a record holds of a quota of a call's own and of a window of
--          its own (nanoseconds: what a valid quota can make, `store/redis/horizon.rs`).
-- Returns: the eight before the raise, as decimal strings, each end as microseconds left from
--          now (0 where it has passed or there was no record). The RATELIMIT_STATE error
--          reply, with nothing written (neither the record nor its expiry), for a key of
--          another type, a string not of this shape, a duration past ARGV[8] or ARGV[9], a
--          second bound past the first or of its id, or an end further from now than the
--          longest a debt can last (MOST_LEFT: 2^62 ns, a
--          bucket's largest tolerance): a record read as zeros would let every move go at
--          once, and one read as ending centuries away would keep every move that long.
--          (Checked only by the service, a duration past its bound was raised into: the
--          penalty's ends written beside it and an expiry set, before the service refused
--          it: probes_horizon_ids_redis.)

local MOST_LEFT = 4611686018427387 -- microseconds

local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return redis.error_reply('RATELIMIT_STATE the reload horizon holds a ' .. kind
    .. ' that is not a record')
end

-- A canonical decimal number within u64 (at most 18446744073709551615), or nil.
local function number(text)
  if type(text) ~= 'string' or #text == 0 or #text > 20 then return nil end
  if not string.match(text, '^%d+$') then return nil end
  if #text > 1 and string.sub(text, 1, 1) == '0' then return nil end
  if #text == 20 and text > '18446744073709551615' then return nil end
  return text
end

-- The larger of two canonical decimal numbers, compared as text: exact past 2^53.
local function larger(a, b)
  if #a ~= #b then
    if #a > #b then return a end
    return b
  end
  if a >= b then return a end
  return b
end

-- A number of at most 16 digits as a Lua number (exact below 2^53), or nil.
local function small(text)
  if not text or #text > 16 then return nil end
  local n = tonumber(text)
  if n > 9007199254740991 then return nil end
  return n
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local held = {'0', '0', 0, '0', 0, '0', 0, '0'}
if kind == 'string' then
  local text = redis.call('GET', KEYS[1])
  local f = {string.match(text, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')}
  local ok = #f == 8
  if ok then
    held = {number(f[1]), number(f[2]), small(number(f[3])), number(f[4]),
      small(number(f[5])), number(f[6]), small(number(f[7])), number(f[8])}
    for i = 1, 8 do ok = ok and held[i] ~= nil end
  end
  if ok then
    ok = held[3] - now <= MOST_LEFT and held[5] - now <= MOST_LEFT
      and held[7] <= held[3] and (held[7] == 0 or held[8] ~= held[4])
      and larger(held[1], ARGV[8]) == ARGV[8] and larger(held[2], ARGV[9]) == ARGV[9]
  end
  if not ok then
    return redis.error_reply('RATELIMIT_STATE the reload horizon is not a record: '
      .. string.sub(text, 1, 96))
  end
end

local asked = {}
for i = 1, 6 do
  asked[i] = number(ARGV[i])
  if not asked[i] then
    return redis.error_reply('RATELIMIT_STATE the reload horizon was asked a raise that is '
      .. 'not a number')
  end
end
local after, raised = {}, false
for i = 1, 8 do after[i] = held[i] end
for i = 1, 2 do
  after[i] = larger(held[i], asked[i])
  raised = raised or after[i] ~= held[i]
end
for i = 3, 5, 2 do
  local left = small(asked[i])
  if not left or left > MOST_LEFT or (left > 0 and asked[i + 1] == '0') then
    return redis.error_reply('RATELIMIT_STATE the reload horizon was asked a penalty end '
      .. 'past the longest a debt can last, or with no id')
  end
  if left > 0 and now + left > held[i] then
    if i == 3 and asked[4] ~= held[4] then
      -- The first bound's former holder, another service: the largest of the others'.
      after[7], after[8] = held[3], held[4]
    end
    after[i], after[i + 1], raised = now + left, asked[i + 1], true
  elseif i == 3 and left > 0 and asked[4] ~= held[4] and now + left > held[7] then
    after[7], after[8], raised = now + left, asked[4], true
  end
end
local keep = tonumber(ARGV[7])
if not keep or keep < 0 or keep ~= math.floor(keep) then
  return redis.error_reply('RATELIMIT_STATE the reload horizon was asked an expiry that is '
    .. 'not a number')
end
if raised or (keep > 0 and kind == 'string') then
  local left = redis.call('PTTL', KEYS[1])
  if left > keep then keep = left end
  if keep < 1 then keep = 1 end
  if raised then
    local text = after[1] .. ' ' .. after[2] .. ' ' .. string.format('%.0f', after[3]) .. ' '
      .. after[4] .. ' ' .. string.format('%.0f', after[5]) .. ' ' .. after[6] .. ' '
      .. string.format('%.0f', after[7]) .. ' ' .. after[8]
    redis.call('SET', KEYS[1], text, 'PX', keep)
  else
    redis.call('PEXPIRE', KEYS[1], keep)
  end
end
local function left_of(at)
  if at <= now then return '0' end
  return string.format('%.0f', at - now)
end
return {held[1], held[2], left_of(held[3]), held[4], left_of(held[5]), held[6],
  left_of(held[7]), held[8]}
