-- sluice.lua -- PROVISIONAL script of the Redis backend (helper rback):
-- fixed-window only, ops D and P, per the script ABI (docs/redis-scripts.md,
-- /work/helpers/REDIS_ABI.md).  The full script (every algorithm, op A)
-- replaces this file at the merge; nothing in the C side depends on more
-- than the ABI.
--
-- EVALSHA sha 1 KEY op now algo L W B P log_rejected cost
-- State of a fixed-window key: a hash {c = count, t = the key's clock (ms)}.
local op, now = ARGV[1], ARGV[2]
if op ~= 'D' and op ~= 'P' then
  return redis.error_reply('SLUICE op ' .. op .. ' is not in the provisional script')
end
local algo, L, W = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local cost = tonumber(ARGV[9])
if algo ~= 0 then
  return redis.error_reply('SLUICE algorithm ' .. ARGV[3] .. ' is not in the provisional script')
end
local given = now ~= ''
if given then
  now = tonumber(now)
else
  local tm = redis.call('TIME')
  now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end
local EXACT = 9007199254740992 -- 2^53: doubles are exact below it
if now >= EXACT or now <= -EXACT or (now + W) >= EXACT or L + cost >= EXACT then
  return redis.error_reply('SLUICE range: a time, limit or cost past 2^53, the Redis backend\'s exact range')
end
local st = redis.call('HMGET', KEYS[1], 'c', 't')
local clock = tonumber(st[2])
local t = now
if clock ~= nil and clock > t then t = clock end
local i = math.floor(t / W)
local count = 0
if clock ~= nil and math.floor(clock / W) == i then count = tonumber(st[1]) end
local allowed = count + cost <= L
if allowed then count = count + cost end
local to_end = (i + 1) * W - t
local retry, reset = 0, 0
if not allowed then
  if cost > L then retry = -1 else retry = to_end end
end
if count > 0 then reset = to_end end
local remaining = L - count
if remaining < 0 then remaining = 0 end
if op == 'D' then
  redis.call('HSET', KEYS[1], 'c', count, 't', t)
  local ttl = reset
  if ttl < 1 then ttl = 1 end
  if given and ttl < 3600000 then ttl = 3600000 end
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return {allowed and 1 or 0, L, remaining, retry, reset, 0}
