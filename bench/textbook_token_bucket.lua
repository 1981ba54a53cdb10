-- The textbook atomic token bucket every Redis comparison in bench/ runs:
-- capacity ARGV[1], refilled ARGV[1] tokens per ARGV[2] ms (the same as
-- RL.ALLOW key 100 10s for 100 10000), state in a hash {tokens, ts} that
-- expires after a window, floating-point tokens, time from Redis's clock
-- (TIME is allowed in scripts since Redis 5 with effects replication, the
-- Redis 7 default).  KEYS[1].  Returns {allowed, remaining}.
local cap = tonumber(ARGV[1])
local win = tonumber(ARGV[2])
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local v = redis.call("HMGET", KEYS[1], "tokens", "ts")
local tokens = tonumber(v[1])
local ts = tonumber(v[2])
if tokens == nil then tokens = cap; ts = now end
if now > ts then tokens = math.min(cap, tokens + (now - ts) * cap / win); ts = now end
local allowed = 0
if tokens >= 1 then tokens = tokens - 1; allowed = 1 end
redis.call("HSET", KEYS[1], "tokens", tokens, "ts", ts)
redis.call("PEXPIRE", KEYS[1], win)
return {allowed, math.floor(tokens)}
