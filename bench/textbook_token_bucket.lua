-- The textbook token bucket (bench/redis_script.sh's baseline): tokens and
-- the last refill time in a hash, refilled at rate per ms, Redis's clock.
-- KEYS[1]; ARGV: capacity, tokens per ms, cost.  Returns {allowed, tokens}.
local cap, rate, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local v = redis.call("HMGET", KEYS[1], "tokens", "ts")
local tokens, ts = tonumber(v[1]) or cap, tonumber(v[2]) or now
tokens = math.min(cap, tokens + math.max(0, now - ts) * rate)
local ok = 0
if tokens >= cost then tokens, ok = tokens - cost, 1 end
redis.call("HMSET", KEYS[1], "tokens", tokens, "ts", now)
redis.call("PEXPIRE", KEYS[1], math.ceil((cap - tokens) / rate) + 1)
return {ok, math.floor(tokens)}
