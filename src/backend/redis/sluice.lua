-- sluice.lua -- PROVISIONAL script of the Redis backend (helper rback):
-- fixed-window only, per the script ABI (docs/redis-scripts.md,
-- /work/helpers/REDIS_ABI.md), so that the backend's C side can be tested.
-- The full script (every algorithm, exact ranges) replaces this file at the
-- merge; nothing in the C side depends on more than the ABI.
--
-- EVALSHA sha n K1..Kn op now <algo L W B P log_rejected cost> x n
-- op D (decide, n = 1), P (peek, n = 1), A (all-or-none, n = 1..16).
-- State of a fixed-window key: a hash {c = count, t = the key's clock (ms)}.
local op, now = ARGV[1], ARGV[2]
if op ~= 'D' and op ~= 'P' and op ~= 'A' then
  return redis.error_reply('SLUICE unknown op ' .. op)
end
local n = #KEYS
if (op ~= 'A' and n ~= 1) or n < 1 or n > 16 or #ARGV ~= 2 + 7 * n then
  return redis.error_reply('SLUICE ' .. n .. ' keys and ' .. #ARGV .. ' arguments do not fit op ' .. op)
end
local given = now ~= ''
if given then
  now = tonumber(now)
else
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end
local EXACT = 9007199254740992 -- 2^53: doubles are exact below it

-- The answer for key i (nothing written): the six fields, and what to write.
local function decide(i)
  local a = 2 + 7 * (i - 1)
  local algo, L, W, cost = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
      tonumber(ARGV[a + 7])
  if algo ~= 0 then
    return nil, 'SLUICE algorithm ' .. ARGV[a + 1] .. ' is not in the provisional script'
  end
  if now >= EXACT or now <= -EXACT or now + W >= EXACT or L + cost >= EXACT then
    return nil, 'SLUICE range: a time, limit or cost past 2^53, the Redis backend\'s exact range'
  end
  local st = redis.call('HMGET', KEYS[i], 'c', 't')
  local clock = tonumber(st[2])
  local t = now
  if clock ~= nil and clock > t then t = clock end
  local w = math.floor(t / W)
  local count = 0
  if clock ~= nil and math.floor(clock / W) == w then count = tonumber(st[1]) end
  local allowed = count + cost <= L
  if allowed then count = count + cost end
  local to_end = (w + 1) * W - t
  local retry, reset = 0, 0
  if not allowed then
    if cost > L then retry = -1 else retry = to_end end
  end
  if count > 0 then reset = to_end end
  local remaining = L - count
  if remaining < 0 then remaining = 0 end
  return {allowed and 1 or 0, L, remaining, retry, reset, 0}, {count, t}
end

local function write(i, st, reset)
  redis.call('HSET', KEYS[i], 'c', st[1], 't', st[2])
  local ttl = reset
  if ttl < 1 then ttl = 1 end
  if given and ttl < 3600000 then ttl = 3600000 end
  redis.call('PEXPIRE', KEYS[i], ttl)
end

if op ~= 'A' then
  local r, st = decide(1)
  if r == nil then return redis.error_reply(st) end
  if op == 'D' then write(1, st, r[5]) end
  return r
end
local out, states, all = {0}, {}, 1
for i = 1, n do
  local r, st = decide(i)
  if r == nil then return redis.error_reply(st) end
  if r[1] == 0 then all = 0 end
  for j = 1, 6 do out[#out + 1] = r[j] end
  states[i] = {st, r[5]}
end
out[1] = all
if all == 1 then
  for i = 1, n do write(i, states[i][1], states[i][2]) end
end
return out
