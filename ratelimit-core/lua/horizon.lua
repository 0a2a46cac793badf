-- The reload horizon of one key prefix (see src/store/redis/horizon.rs): how long what a
-- fleet's services wrote under the prefix may hold a state a reload moves to another, raised
-- field by field to at least what is asked (a max: never lowered); the record as it was
-- before is returned (the caller tells another service's raise from its own by it).
--
-- KEYS[1]: the record: a string of three decimal numbers, each in nanoseconds, separated by
--          single spaces (the longest a quota of a call's own outlasts a reload, the longest
--          window of a call's own, when the latest penalty's debt ends); no key is zeros.
-- ARGV[1..3]: the three to raise it to (0 where nothing is raised: a read).
-- ARGV[4]: how long, in milliseconds, the record is kept at least from now (0: a read, the
--          expiry left as it is): twice the longest of what is raised, so that a state
--          written with it holds nothing once the record expires, the raising service raising
--          it again (and so keeping it) at its first write past half of that. Never shortened:
--          every key of the store expires.
-- Returns: the three before the raise (zeros where there was no record), as decimal strings. The RATELIMIT_STATE error reply, with nothing
--          written, for a key of another type or a string not of this shape: a record read
--          as zeros would let every move go at once.

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

local held = {'0', '0', '0'}
if kind == 'string' then
  local text = redis.call('GET', KEYS[1])
  local a, b, c = string.match(text, '^(%d+) (%d+) (%d+)$')
  held = {number(a), number(b), number(c)}
  if not (held[1] and held[2] and held[3]) then
    return redis.error_reply('RATELIMIT_STATE the reload horizon is not a record: '
      .. string.sub(text, 1, 64))
  end
end
local after, raised = {}, false
for i = 1, 3 do
  local asked = number(ARGV[i])
  if not asked then
    return redis.error_reply('RATELIMIT_STATE the reload horizon was asked a raise that is '
      .. 'not a number')
  end
  after[i] = larger(held[i], asked)
  raised = raised or after[i] ~= held[i]
end
local keep = tonumber(ARGV[4])
if not keep or keep < 0 or keep ~= math.floor(keep) then
  return redis.error_reply('RATELIMIT_STATE the reload horizon was asked an expiry that is '
    .. 'not a number')
end
if raised or (keep > 0 and kind == 'string') then
  local left = redis.call('PTTL', KEYS[1])
  if left > keep then keep = left end
  if keep < 1 then keep = 1 end
  if raised then
    redis.call('SET', KEYS[1], after[1] .. ' ' .. after[2] .. ' ' .. after[3], 'PX', keep)
  else
    redis.call('PEXPIRE', KEYS[1], keep)
  end
end
return held
