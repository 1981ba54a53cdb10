--[[
sluice.lua -- every algorithm of sluice as one atomic Redis script.

The ABI (fixed, docs/redis-scripts.md):
    EVALSHA <sha> <n> K1 .. Kn  <op> <now> <7 fields for K1> .. <7 for Kn>
op D (decide, n = 1), P (peek: nothing written), A (decide-all, n 1..16:
all charged or none), M (many: n 1..64 independent decisions in order, one
call for what several D calls would do); now "" = Redis's TIME, else trusted client ms; the 7
fields: algo L W B(0 = L) P(0 = 10) log_rejected cost.  Replies: 6
integers (allowed limit remaining retry_after_ms reset_after_ms delay_ms),
for A 1 + 6n (all_allowed first), for M n elements, each the 6 integers
or the error of that one request; a refused request is an error reply
starting "SLUICE " and writes nothing.  Op B is M with two arguments a
key ("algo L W B P log_rejected" as one string, then the cost: see
batch() below); op C (one RL.CHECK, its own argument layout: see check()
below) runs a whole planned request.  Ops T (take a lease) and R (return
one) are D with one or two more arguments: see "leases" below.

The decisions are those of src/lib/engine.c, step for step, on the same
state quantities (so a change of parameters carries over the same way).
Lua numbers are doubles: every quantity used stays an exact integer of at
most 2^53.  Where parameters (or a kept count) could pass that, the
request is refused before anything is read back or written; the bounds and
why they suffice are in docs/redis-scripts.md.  Divisions go through fdiv
(exact: C's fmod is exact), never through Lua's % or a rounded quotient.

State, one Redis key per counter (decimal integers):
  fixed-window     string  "clock count"
  sliding-window   string  "clock cur prev"
  sliding-buckets  string  "clock P sum c0 .. c(P-1)"
  token-bucket     string  "clock dw dr"   tokens = dw + dr/W
  gcra             string  "clock dw dr"   TAT - clock = (dw*W + dr)/L ms
  leaky-bucket     string  "clock dw dr"   level = dw + dr/W
  sliding-log      hash    k clock, s sum, f first, l last, h head, n next;
                           field <seq> = "time" or "time cost" per entry
--]]

local TWO53 = 9007199254740992
local HOUR_MS = 3600000
local MANY = 64 -- the most decisions one M call carries
local RANGE_TAIL = " passes 2^53, the Redis backend's exact range (docs/redis-scripts.md)"

local fmod, floor = math.fmod, math.floor

-- A refusal: caught at the top and turned into an error reply.
local function refuse(msg)
    error({sluice = msg}, 0)
end

-- The integer x as decimal digits (tostring would print 1e+15).
local function dec(x)
    return string.format("%d", x)
end

-- floor(a / b) and a - b*floor(a / b), exact for |a| <= 2^53, 0 < b.
local function fdiv(a, b)
    local r = fmod(a, b)
    local q = (a - r) / b
    if r < 0 then
        return q - 1, r + b
    end
    return q, r
end

-- ceil(a / b) for 0 <= a <= 2^53, 0 < b.
local function cdiv(a, b)
    local q, r = fdiv(a, b)
    if r > 0 then
        return q + 1
    end
    return q
end

-- a*b in decimal, exact for 0 <= a, b < 2^42 (for messages only).
local function mulstr(a, b)
    local M = 1000000
    local a1, a0 = fdiv(a, M)
    local b1, b0 = fdiv(b, M)
    local mid1, mid0 = fdiv(a1 * b0 + a0 * b1, M)
    local carry, lo = fdiv(a0 * b0 + mid0 * M, M * M)
    local hi = a1 * b1 + mid1 + carry
    if hi == 0 then
        return dec(lo)
    end
    return dec(hi) .. string.format("%012d", lo)
end

-- Refuses unless a*b <= 2^53 (a, b >= 0 integers); what names a*b.
local function within(a, b, what)
    if b > 0 and a > fdiv(TWO53, b) then
        refuse("range: " .. what .. " = " .. mulstr(a, b) .. RANGE_TAIL)
    end
end

-- The six fields (SPEC 3): remaining clamped at 0, retry only when
-- denied, delay only when allowed.
local function answer(allowed, limit, remaining, retry, reset, delay)
    if remaining < 0 then remaining = 0 end
    if allowed then
        return {1, limit, remaining, 0, reset, delay}
    end
    return {0, limit, remaining, retry, reset, 0}
end

-- ---- string states: parse / format ---------------------------------------

local smatch, sformat = string.match, string.format

-- The integers of a state string; the usual three ("clock a b": the
-- buckets and fixed-window's two) in one match, the rest word by word.
local function parse_ints(s)
    local a, b, c = smatch(s, "^(%-?%d+) (%-?%d+) (%-?%d+)$")
    if a then return {tonumber(a), tonumber(b), tonumber(c)} end
    a, b = smatch(s, "^(%-?%d+) (%-?%d+)$")
    if a then return {tonumber(a), tonumber(b)} end
    local v = {}
    for w in string.gmatch(s, "%S+") do
        v[#v + 1] = tonumber(w)
    end
    return v
end

local function join_ints(v)
    local n = #v
    if n == 3 then return sformat("%d %d %d", v[1], v[2], v[3]) end
    if n == 2 then return sformat("%d %d", v[1], v[2]) end
    local out = {}
    for i = 1, n do
        out[i] = dec(v[i])
    end
    return table.concat(out, " ")
end

-- ---- fixed-window --------------------------------------------------------
-- st = {count} or nil.  Returns the reply and the new state.

local function fixed_window(st, n, clock_old, t, cost)
    local W, L = n.W, n.L
    local i, e = fdiv(t, W)
    local count = 0
    if st and fdiv(clock_old, W) == i then
        count = st[1]
    end
    local allowed = count + cost <= L
    if allowed then count = count + cost end
    local to_end = W - e
    local retry = to_end
    if cost > L then retry = -1 end
    local reset = 0
    if count > 0 then reset = to_end end
    return answer(allowed, L, L - count, retry, reset, 0), {count}
end

-- ---- sliding-window ------------------------------------------------------
-- st = {cur, prev}: the counts of the clock's window and the one before.

-- floor(p * x / W): p*x <= 2^53 by the range checks.
local function weigh(p, x, W)
    return (fdiv(p * x, W))
end

-- Smallest offset e in [0, W] at which floor(p * (W - e) / W) <= r.
local function weighed_below(p, r, W)
    if p == 0 then return 0 end
    local k = fdiv((r + 1) * W - 1, p)
    if k >= W then return 0 end
    return W - k
end

local function sliding_window(st, n, clock_old, t, cost)
    local W, L = n.W, n.L
    local i, e = fdiv(t, W)
    local io = fdiv(clock_old, W)
    local cur, prev = 0, 0
    if st and i == io then
        cur, prev = st[1], st[2]
    elseif st and i == io + 1 then
        prev = st[1]
    end
    within(prev, W, "the previous window's count*W")
    local used = cur + weigh(prev, W - e, W)
    local allowed = used + cost <= L
    if allowed then
        cur = cur + cost
        used = used + cost
    end
    local retry = -1
    if not allowed and cost <= L then
        local r = L - cost - cur
        local e1
        if r >= 0 then e1 = weighed_below(prev, r, W) end
        if r >= 0 and e1 < W and e1 > e then
            retry = e1 - e
        else
            local e2 = weighed_below(cur, L - cost, W)
            if e2 < W then retry = W - e + e2 else retry = W - e + W end
        end
    end
    local reset
    if cur > 0 then
        reset = W - e + weighed_below(cur, 0, W)
    else
        reset = weighed_below(prev, 0, W)
        if reset < e then reset = e end
        reset = reset - e
    end
    return answer(allowed, L, L - used, retry, reset, 0), {cur, prev}
end

-- ---- sliding-buckets -----------------------------------------------------
-- st = {P, sum, c0, .., c(P-1)} (counter j at st[3 + j]).

local function sliding_buckets(st, n, clock_old, t, cost, commit)
    local L, P = n.L, n.P
    local g = n.W / P -- P divides W (sl_params_check)
    local sum, c = 0, nil -- c nil: a fresh key (peek)
    if not st and commit then
        c = {}
        for j = 0, P - 1 do c[j] = 0 end
    end
    if st then
        sum = st[2]
        c = {}
        if st[1] == P then
            for j = 0, P - 1 do c[j] = st[3 + j] end
        else
            -- A new precision: the window's count moves to the bucket of
            -- the key's latest time (engine.c, sl__state_adapt).
            for j = 0, P - 1 do c[j] = 0 end
            local q = fdiv(clock_old, g)
            local _, j = fdiv(q, P)
            c[j] = sum
        end
    end
    local b, tm = fdiv(t, g)
    local bo = fdiv(clock_old, g)
    local _, bp = fdiv(b, P) -- b's counter
    local stale = b - bo
    if stale > P then stale = P end
    if c and stale == P then
        sum = 0
        for j = 0, P - 1 do c[j] = 0 end
    elseif c and stale > 0 then
        for k = 1, stale do
            local j = (bp - stale + k) % P -- (bo + k) mod P, small operands
            sum = sum - c[j]
            c[j] = 0
        end
    end
    -- The count of bucket b + d (d <= 0) of the window (b - P, b].
    local function count(d)
        if c == nil or b + d > bo then return 0 end
        return c[(bp + d) % P]
    end
    local allowed = sum + cost <= L
    if allowed then
        sum = sum + cost
        if commit and cost > 0 then c[bp] = count(0) + cost end
    end
    local retry = -1
    if not allowed and cost <= L then
        local need, freed = sum + cost - L, 0
        for k = 1, P do
            freed = freed + count(k - P)
            if freed >= need then
                retry = k * g - tm
                break
            end
        end
    end
    local reset = 0
    if sum > 0 then
        local d = 0
        while d > -P and count(d) == 0 and not (allowed and cost > 0 and d == 0) do
            d = d - 1
        end
        reset = (d + P) * g - tm
    end
    local new
    if commit then
        new = {P, sum}
        for j = 0, P - 1 do new[3 + j] = c and c[j] or 0 end
    end
    return answer(allowed, L, L - sum, retry, reset, 0), new
end

-- ---- token-bucket, leaky-bucket, gcra ------------------------------------
-- One exact quantity in units of 1/W of a request, stored split as
-- dw*W + dr: the tokens (mode 0), the level (1), TAT - clock (2).  d below
-- is the deficit: capacity minus tokens, the level, or TAT - t.  B*W <=
-- 2^53 (checked), so every sum and difference below is exact.
--
-- A debt (engine.c's SL__BUCKET_DEBT): a settle that charges past an empty
-- bucket keeps what lies beyond as E units of 1/W, so d = B*W + E -- E
-- kept whatever B is now, its whole part whatever W is.  Stored "dw dr"
-- with dw < 0: E = (-1 - dw)*W + dr (dr < W), the flag no plain state
-- has.  E saturates where the engine's does (DEBT_Q whole requests and
-- W - 1 parts); a debt with B*W + E past 2^53 is refused (the range).

local DEBT_Q = 1099511627775 -- engine.c's debt_max: a u40 of whole requests

-- The largest deficit a bucket keeps (engine.c's B*W + debt_max(W)), or
-- nil when that passes 2^53 (then the range refuses first).
local function bucket_dmax(n)
    local W, BW = n.W, n.B * n.W
    if DEBT_Q > fdiv(TWO53 - BW - (W - 1), W) then return nil end
    return BW + DEBT_Q * W + W - 1
end

-- A deficit d of a bucket (mode 0 token-bucket, 1 leaky-bucket, 2 gcra) as
-- its stored pair; past B*W, a debt.
local function bucket_state(n, mode, d)
    local BW = n.B * n.W
    if d > BW then
        local q, r = fdiv(d - BW, n.W)
        return {-1 - q, r}
    end
    local v = d
    if mode == 0 then v = BW - d end
    local q, r = fdiv(v, n.W)
    return {q, r}
end

-- O: units leased out and not yet settled (token-bucket and gcra, op T):
-- the refill stops at a deficit of O*W, so that tokens plus what nodes
-- hold never pass B (docs/fleet.md, "Leases").  Also returns d.
local function bucket(st, n, mode, clock_old, t, cost, O)
    local W, L, B = n.W, n.L, n.B
    local BW = B * W
    local d = 0
    if st then
        local dw, dr = st[1], st[2]
        if dr >= W then dr = W - 1 end
        if dw < 0 then -- a debt beyond empty (a settle's)
            local q = -1 - dw
            if q > fdiv(TWO53 - BW - dr, W) then
                refuse("range: B*W + the bucket's debt = " .. mulstr(q, W) .. " + " ..
                       dec(BW + dr) .. RANGE_TAIL)
            end
            d = BW + q * W + dr
        elseif dw > B then
            d = BW
        else
            d = dw * W + dr -- may round only above BW: clamped below
            if d > BW then d = BW end
        end
        if mode == 0 and dw >= 0 then d = BW - d end
    end
    -- A refill past 2^53 rounds, but only to a number >= 2^53 >= d.
    local refill = (t - clock_old) * L
    local low = 0
    if O and O > 0 then
        low = O * W -- O <= B: exact
        if low > d then low = d end
    end
    if refill >= d - low then d = low else d = d - refill end

    local before = d
    local allowed, retry, delay = false, 0, 0
    if cost > B then
        retry = -1
    else
        local cW = cost * W
        allowed = cW <= BW - d
        if allowed then
            d = d + cW
        else
            retry = cdiv(cW - (BW - before), L) -- cW + the debt <= 2^53
        end
    end
    if allowed and mode == 1 then delay = cdiv(before, L) end
    local remaining = 0 -- in debt: 0
    if d <= BW then
        if mode == 1 then
            local q, r = fdiv(d, W)
            remaining = B - q
            if r ~= 0 then remaining = remaining - 1 end
        else
            remaining = fdiv(BW - d, W)
        end
    end
    return answer(allowed, B, remaining, retry, cdiv(d, L), delay), bucket_state(n, mode, d), d
end

-- ---- sliding-log ---------------------------------------------------------
-- A hash: the header fields and one field per entry, numbered from h
-- (oldest) to n - 1 (newest).  The view lg reads entries on demand and
-- remembers what a commit must delete and add.

local function log_entry(lg, seq)
    local e = lg.cache[seq]
    if e == nil then
        local s = redis.call("HGET", lg.key, dec(seq))
        local tt, cc = string.match(s, "^(%-?%d+) ?(%d*)$")
        e = {tonumber(tt), cc == "" and 1 or tonumber(cc)}
        lg.cache[seq] = e
    end
    return e
end

local function log_pop(lg)
    local e = log_entry(lg, lg.head)
    lg.dropped[#lg.dropped + 1] = lg.head
    lg.head = lg.head + 1
    lg.sum = lg.sum - e[2]
    if lg.head < lg.next then lg.first = log_entry(lg, lg.head)[1] end
end

-- Time of the entry at which the entries, oldest first, first sum to >=
-- need; t if they never do.
local function log_expiry_of(lg, need, t)
    local freed = 0
    for seq = lg.head, lg.next - 1 do
        local e = log_entry(lg, seq)
        freed = freed + e[2]
        if freed >= need then return e[1] end
    end
    return t
end

local function sliding_log(lg, n, t, cost, commit)
    local L, W = n.L, n.W
    -- Drop entries no longer inside (t - W, t] (first <= clock <= t).
    while lg.head < lg.next and t - lg.first >= W do log_pop(lg) end

    local allowed, logged
    local sum, last = lg.sum, lg.last
    if n.lr then
        logged = cost > 0
        sum = sum + cost
        allowed = sum <= L
    else
        allowed = sum + cost <= L
        logged = allowed and cost > 0
        if allowed then sum = sum + cost end
    end
    if logged then last = t end
    local retry = -1
    if not allowed and cost <= L then
        local need = lg.sum + cost - L
        if n.lr then need = sum + cost - L end
        local at = t
        if need <= lg.sum then at = log_expiry_of(lg, need, t) end
        retry = W - (t - at)
    end
    local reset = 0
    if sum > 0 then reset = W - (t - last) end
    local ans = answer(allowed, L, L - sum, retry, reset, 0)

    if commit and logged then
        if lg.head == lg.next then lg.first = t end
        local seq = lg.next
        lg.cache[seq] = {t, cost}
        lg.added = seq
        lg.next = seq + 1
        lg.last = t
        lg.sum = lg.sum + cost
        if n.lr then
            -- Keep only the newest entries whose costs exceed L.
            while lg.sum - log_entry(lg, lg.head)[2] >= L + 1 do log_pop(lg) end
        end
    end
    return ans
end

local function log_load(key)
    local h = redis.call("HMGET", key, "k", "s", "f", "l", "h", "n")
    local lg = {key = key, cache = {}, dropped = {}, sum = 0, first = 0, last = 0,
                head = 0, next = 0}
    if h[1] then
        lg.clock = tonumber(h[1])
        lg.sum, lg.first, lg.last = tonumber(h[2]), tonumber(h[3]), tonumber(h[4])
        lg.head, lg.next = tonumber(h[5]), tonumber(h[6])
    end
    return lg
end

local function log_save(lg, clock, ttl)
    local key = lg.key
    local dropped = lg.dropped
    for i = 1, #dropped, 1000 do
        local chunk = {}
        for j = i, math.min(i + 999, #dropped) do chunk[#chunk + 1] = dec(dropped[j]) end
        redis.call("HDEL", key, unpack(chunk))
    end
    local args = {"k", dec(clock), "s", dec(lg.sum), "f", dec(lg.first), "l", dec(lg.last),
                  "h", dec(lg.head), "n", dec(lg.next)}
    if lg.added and lg.added >= lg.head then
        local e = lg.cache[lg.added]
        args[#args + 1] = dec(lg.added)
        args[#args + 1] = e[2] == 1 and dec(e[1]) or (dec(e[1]) .. " " .. dec(e[2]))
    end
    redis.call("HSET", key, unpack(args))
    redis.call("PEXPIRE", key, ttl)
end

-- ---- one request ---------------------------------------------------------

local ALGOS = 7

-- The 7 fields of key i (1-based) at ARGV[base + 1 .. base + 7], checked
-- for the script's own range.
local function field(base, k, i)
    local v = tonumber(ARGV[base + k])
    if v == nil or v ~= floor(v) then
        refuse("args: field " .. k .. " of key " .. i .. " is not an integer")
    end
    return v
end

-- The request of key i from its numbers, checked for the script's own range.
local function make_request(algo, L, W, B, P, lr, cost, i)
    local n = {algo = algo, L = L, W = W, B = B, P = P, lr = lr ~= 0, cost = cost, B0 = B}
    if n.algo < 0 or n.algo >= ALGOS then refuse("args: algo " .. dec(n.algo) .. " of key " .. i) end
    if n.L < 1 or n.W < 1 or n.cost < 0 or n.B < 0 or n.P < 0 then
        refuse("args: L, W, B, P or cost of key " .. i .. " out of range")
    end
    if n.B == 0 then n.B = n.L end
    if n.P == 0 then n.P = 10 end
    if n.algo == 2 then
        within(n.L + 1, n.W, "(L+1)*W")
    elseif n.algo >= 4 then
        within(n.B, n.W, "B*W")
    end
    return n
end

local function fields(base, i)
    return make_request(field(base, 1, i), field(base, 2, i), field(base, 3, i), field(base, 4, i),
                        field(base, 5, i), field(base, 6, i), field(base, 7, i), i)
end

-- The 7 fields of request i of D, P, A, M.
local function request(i)
    return fields(2 + (i - 1) * 7, i)
end

-- n with the limit L instead (a burst of 0 follows it), range-checked.
local function with_limit(n, L)
    local c = {}
    for k, v in pairs(n) do c[k] = v end
    c.L = L
    if c.B0 == 0 then c.B = L end
    if c.algo == 2 then
        within(L + 1, c.W, "(L+1)*W")
    elseif c.algo >= 4 then
        within(c.B, c.W, "B*W")
    end
    return c
end

-- ---- leases (ops T and R; docs/fleet.md, "Leases") -----------------------
-- A lease is units of a key's allowance charged to its state now and spent
-- later by the node that took them, or handed back (R).  fixed-window and
-- sliding-window: the units are in the (current) window's count, valid in
-- that window only (its index is the lease's tag).  sliding-buckets: in the
-- current bucket's count, valid in that bucket only (its index is the
-- tag), handed back into it while it is in the window.  token-bucket and
-- gcra: the tokens are taken from the
-- bucket, and the state keeps what is out, by epoch of LEASE_EPOCH ms:
-- "clock dw dr e O0 O1", O0 leased in epoch e, O1 in epoch e - 1.  A lease
-- of epoch e is settled (counted spent) at the start of epoch e + 2, so
-- it lives at least LEASE_EPOCH ms; the taker stops spending before (it
-- counts the ttl from before it sent T).  While units are out the refill
-- stops short of B by them (bucket's O).

local LEASE_EPOCH = 250

-- lz = {e, O0, O1} moved to the epoch of t (its expired part dropped).
local function lease_at(lz, t)
    local ce = fdiv(t, LEASE_EPOCH)
    if ce == lz[1] + 1 then
        return {ce, 0, lz[2]}
    elseif ce ~= lz[1] then
        return {ce, 0, 0}
    end
    return lz
end

-- A key's stored state s (nil: none) for algorithm a read at now: its
-- fields without the clock, the clock (now when none), the time it is
-- decided at (never before its clock, SPEC 4), and for a bucket (a 4, 5)
-- with units leased out its lease tail moved to that time (lease_at) and
-- the units it holds out (O; 0 without).
local function split_state(s, now, a)
    local st, clock_old = nil, now
    if s then
        st = parse_ints(s)
        clock_old = table.remove(st, 1)
    end
    local t = now > clock_old and now or clock_old
    local lz, O = nil, 0
    if (a == 4 or a == 5) and st and #st == 5 then
        lz = lease_at({st[3], st[4], st[5]}, t)
        st[3], st[4], st[5] = nil, nil, nil
        O = lz[2] + lz[3]
    end
    return st, clock_old, t, lz, O
end

-- Decides request n on key at now (commit: D, or A's second pass).
-- Returns the reply and, when committing, a function that writes.
-- During M: the string states of its keys read by one MGET (false: no
-- such key), kept current by the call's writes; nil otherwise.
-- lease (ops T, R; commit): {op = "T", want = units} takes up to want -
-- cost more units when the request is allowed (lease.extra, .ttl, .tag
-- set); {op = "R", back = units, taken = units, tag = t} hands back
-- `back` of a lease of `taken` (the request's cost is 0; lease.back set
-- to what was put back).
local pre = nil

local function decide(key, n, now, commit, lease)
    local a = n.algo
    if a == 1 then
        local lg = log_load(key)
        local clock_old = lg.clock or now
        local t = now > clock_old and now or clock_old
        local ans = sliding_log(lg, n, t, n.cost, commit)
        return ans, function(ttl) log_save(lg, t, ttl) end
    end
    local s
    if pre then s = pre[key] end
    if s == nil then s = redis.call("GET", key) end
    local st, clock_old, t, lz, O = split_state(s, now, a)
    local ans, new, d
    if a == 0 then
        ans, new = fixed_window(st, n, clock_old, t, n.cost)
    elseif a == 2 then
        ans, new = sliding_window(st, n, clock_old, t, n.cost)
    elseif a == 3 then
        ans, new = sliding_buckets(st, n, clock_old, t, n.cost, commit)
    elseif a == 4 then
        ans, new, d = bucket(st, n, 0, clock_old, t, n.cost, O)
    elseif a == 5 then
        ans, new, d = bucket(st, n, 2, clock_old, t, n.cost, O)
    else
        ans, new = bucket(st, n, 1, clock_old, t, n.cost)
    end
    if lease and (a == 0 or a == 2 or a == 3 or a == 4 or a == 5) then
        if a >= 4 and lz == nil then lz = {fdiv(t, LEASE_EPOCH), 0, 0} end
        if lease.op == "T" then
            lease.extra, lease.ttl, lease.tag = 0, 0, 0
            if ans[1] == 1 then
                -- at most half of what is left: the last units of a window
                -- go one request at a time, never stranded in a lease
                local x = lease.want - n.cost
                local half = fdiv(ans[3], 2)
                if x > half then x = half end
                if x < 0 then x = 0 end
                lease.extra = x
                ans[3] = ans[3] - x
                if a == 0 then
                    local i, e = fdiv(t, n.W)
                    new[1] = new[1] + x
                    if new[1] > 0 then ans[5] = n.W - e end
                    lease.ttl, lease.tag = n.W - e, i
                elseif a == 2 then
                    -- in the current window's count, as fixed-window's:
                    -- the weighted previous window only shrinks as the
                    -- window goes on (docs/fleet.md, the proof sketch)
                    local i, e = fdiv(t, n.W)
                    new[1] = new[1] + x
                    if x > 0 then ans[5] = n.W - e + weighed_below(new[1], 0, n.W) end
                    lease.ttl, lease.tag = n.W - e, i
                elseif a == 3 then
                    -- in the current bucket's count, spent in that bucket
                    -- only: the units slide out of the window exactly when
                    -- that bucket's own admissions do (docs/fleet.md)
                    local g = n.W / n.P
                    local b, tm = fdiv(t, g)
                    local _, j = fdiv(b, n.P)
                    new[3 + j] = new[3 + j] + x
                    new[2] = new[2] + x
                    if x > 0 then ans[5] = n.W - tm end
                    lease.ttl, lease.tag = g - tm, b
                else
                    d = d + x * n.W
                    new = bucket_state(n, a == 4 and 0 or 2, d)
                    ans[5] = cdiv(d, n.L)
                    lz[2] = lz[2] + x
                    lease.ttl, lease.tag = (lz[1] + 2) * LEASE_EPOCH - t, lz[1]
                end
            end
        else -- R: cost 0, so ans only brought the state to t
            local back, taken, tag = lease.back, lease.taken, lease.tag
            lease.back = 0
            if a == 0 or a == 2 then
                if fdiv(t, n.W) == tag and back > 0 then
                    if back > new[1] then back = new[1] end
                    new[1] = new[1] - back
                    lease.back = back
                end
            elseif a == 3 then
                -- into its bucket while that bucket is in the window, also
                -- after its end: units never spent may leave its count
                local b = fdiv(t, n.W / n.P)
                if back > 0 and tag <= b and tag > b - n.P then
                    local _, j = fdiv(tag, n.P)
                    if back > new[3 + j] then back = new[3 + j] end
                    new[3 + j] = new[3 + j] - back
                    new[2] = new[2] - back
                    lease.back = back
                end
            else
                local k = 0
                if tag == lz[1] then k = 2 elseif tag == lz[1] - 1 then k = 3 end
                if k > 0 then
                    if taken > lz[k] then taken = lz[k] end
                    if back > taken then back = taken end
                    lz[k] = lz[k] - taken
                    local low = (lz[2] + lz[3]) * n.W
                    local d2 = d - back * n.W
                    if d2 < low then d2 = low end
                    lease.back = fdiv(d - d2, n.W)
                    d = d2
                    new = bucket_state(n, a == 4 and 0 or 2, d)
                end
                ans[5] = cdiv(d, n.L)
            end
        end
    end
    local lease_end = 0
    if lz and lz[2] + lz[3] > 0 then
        new[3], new[4], new[5] = lz[1], lz[2], lz[3]
        lease_end = (lz[1] + 2) * LEASE_EPOCH - t
    end
    return ans, function(ttl)
        if ttl < lease_end then ttl = lease_end end
        table.insert(new, 1, t)
        local v = join_ints(new)
        redis.call("SET", key, v, "PX", ttl)
        if pre then pre[key] = v end
    end
end

-- The expiry of a write whose reply is ans: never before the state is a
-- fresh key's, and with client time not before an hour of real time.
local function ttl_of(ans, client_time)
    local ttl = ans[5]
    if ttl < 1 then ttl = 1 end
    if client_time and ttl < HOUR_MS then ttl = HOUR_MS end
    return ttl
end

-- M: n independent decisions, in order, as n D calls would make them (a
-- key given twice sees its first charge); a refused one is an error
-- element of the reply and writes nothing, the others stand.
-- The request of M's previous key, and where its fields start: a batch
-- mostly repeats one limit's parameters, which are then parsed once
-- (ARGV's strings are interned: comparing them is cheap).
local prev_n, prev_base = nil, 0

local function many_request(i)
    local base = 2 + (i - 1) * 7
    local pb, n = prev_base, prev_n
    if n and ARGV[base + 1] == ARGV[pb + 1] and ARGV[base + 2] == ARGV[pb + 2] and
        ARGV[base + 3] == ARGV[pb + 3] and ARGV[base + 4] == ARGV[pb + 4] and
        ARGV[base + 5] == ARGV[pb + 5] and ARGV[base + 6] == ARGV[pb + 6] then
        if ARGV[base + 7] ~= ARGV[pb + 7] then
            local cost = field(base, 7, i)
            if cost < 0 then refuse("args: L, W, B, P or cost of key " .. i .. " out of range") end
            n = {algo = n.algo, L = n.L, W = n.W, B = n.B, P = n.P, lr = n.lr, cost = cost,
                 B0 = n.B0}
        end
    else
        n = request(i)
    end
    prev_n, prev_base = n, base
    return n
end

local function many_one(i, now, client_time)
    local ans, write = decide(KEYS[i], many_request(i), now, true)
    write(ttl_of(ans, client_time))
    return ans
end

local function many(nkeys, now, client_time)
    local out = {}
    -- every string state in one read (a hash, sliding-log's, reads as false)
    local vals = redis.call("MGET", unpack(KEYS, 1, nkeys))
    prev_n = nil
    pre = {}
    for i = 1, nkeys do
        if pre[KEYS[i]] == nil then pre[KEYS[i]] = vals[i] end
    end
    for i = 1, nkeys do
        local ok, res = pcall(many_one, i, now, client_time)
        if ok then
            out[i] = res
        elseif type(res) == "table" and res.sluice then
            out[i] = {err = "SLUICE " .. res.sluice}
        else
            pre = nil
            error(res, 0)
        end
    end
    pre = nil
    return out
end

-- B: M with two arguments a key -- "algo L W B P log_rejected" as one
-- string, and the cost.  A batch mostly repeats one limit: its requests
-- are parsed once per (parameters, cost), both strings interned by Lua,
-- and Redis handles 3 arguments a decision instead of 8.
local function batch_request(i, cache)
    local ps, cs = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
    local byc = cache[ps]
    if byc == nil then
        byc = {}
        cache[ps] = byc
    end
    local n = byc[cs]
    if n == nil then
        local a, L, W, B, P, lr = smatch(ps, "^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$")
        if a == nil then refuse("args: the parameters of key " .. i .. " are not 6 integers") end
        local cost = tonumber(cs)
        if cost == nil or cost ~= floor(cost) then
            refuse("args: the cost of key " .. i .. " is not an integer")
        end
        n = make_request(tonumber(a), tonumber(L), tonumber(W), tonumber(B), tonumber(P),
                         tonumber(lr), cost, i)
        byc[cs] = n
    end
    return n
end

local function batch_one(i, now, client_time, cache)
    local ans, write = decide(KEYS[i], batch_request(i, cache), now, true)
    write(ttl_of(ans, client_time))
    return ans
end

local function batch(nkeys, now, client_time)
    local out, cache = {}, {}
    local vals = redis.call("MGET", unpack(KEYS, 1, nkeys))
    pre = {}
    for i = 1, nkeys do
        if pre[KEYS[i]] == nil then pre[KEYS[i]] = vals[i] end
    end
    for i = 1, nkeys do
        local ok, res = pcall(batch_one, i, now, client_time, cache)
        if ok then
            out[i] = res
        elseif type(res) == "table" and res.sluice then
            out[i] = {err = "SLUICE " .. res.sluice}
        else
            pre = nil
            error(res, 0)
        end
    end
    pre = nil
    return out
end

-- A (sl_decide_all) on list[i] = {key =, n =}: every request answered
-- first without charging; all charged (and written) only if all pass,
-- else nothing is written and each has its answer as if alone.  Returns
-- the answers and whether all passed.
local function decide_all(list, now, client_time)
    local out, all = {}, true
    for i = 1, #list do
        out[i] = decide(list[i].key, list[i].n, now, false)
        if out[i][1] == 0 then all = false end
    end
    if not all then return out, false end
    local writes = {}
    for i = 1, #list do
        local ans, write = decide(list[i].key, list[i].n, now, true)
        out[i] = ans
        writes[i] = {write, ttl_of(ans, client_time)}
    end
    for i = 1, #list do writes[i][1](writes[i][2]) end
    return out, true
end

-- ---- C: one RL.CHECK -----------------------------------------------------
-- The whole of sl__local_check_exec (src/backend/backend_local.c) in one
-- call, so a request's counters are charged all-or-none atomically:
--   ARGV: C now m pool denied_never qall zmask
--         then per counter i = 1..m (KEYS[i]): the 7 fields, shadow, quota,
--         lyft, ceiling (elastic: the limit's elastic_limit, else 0), qmask
--         then, when pool = 1 (KEYS[m + 1]), the pool's 7 fields (its cost
--         the request's).
--         then nl, the concurrency limits' leases (docs/rules.md,
--         "Concurrency"), and per lease j = 1..nl (KEYS[m + np + 2j - 1] its
--         hh, KEYS[m + np + 2j] its hl, as ops LA / LR below): take (1: kept
--         when the request passes; 0: only looked at), shadow, max, ttl.
--   qall: the quota descriptors (bit d: descriptor d); zmask: those with
--   an L = 0 limit (over from the start); qmask: the quota descriptors
--   holding counter i (0: not a quota counter).
--   Reply: allowed, quota_denied, pool_charged, then per counter its six
--   fields and stretched (passed above L on the pool), then per lease its
--   six fields (what LA would answer now) and its id (0: none held).
--   Leases all-or-none with the rates, as check_leases (backend_local.c):
--   a non-shadow lease set that is full denies the request (its counters
--   only peeked, nothing charged, no lease taken); a rate that denies
--   takes no lease; only an allowed request adds its leases, last, so a
--   refusal leaves them as they were.  Shadow leases never deny: taken
--   when the request passes (and has room), else only looked at.

local MAX_LIMIT = 1000000000000 -- SL_MAX_LIMIT: Lyft-counted counters are charged at it
local MAX_BATCH = 16            -- SL_MAX_BATCH: counters of one request, members of one A

local function int_arg(i, what)
    local v = tonumber(ARGV[i])
    if v == nil or v ~= floor(v) then refuse("args: " .. what .. " is not an integer") end
    return v
end

-- A Lyft-counted counter's answer from its answer at L = MAX_LIMIT (which
-- charged it): the count after the charge judged against its own L.
local function lyft_answer(n, big)
    local L = n.L
    local after = MAX_LIMIT - big[3]
    local ok = after <= L
    local retry = 0
    if not ok then
        retry = big[5]
        if n.cost > L then retry = -1 end
    end
    return {ok and 1 or 0, L, ok and L - after or 0, retry, big[5], 0}
end

-- C's leases (the layout above), each {hh, hl, take, shadow, max, ttl};
-- their state read as op LA reads it: t = max(now, the leases' clock),
-- the leases expired at t dropped (nothing a caller can see), n held.
local function lease_look(ls, now)
    local v = redis.call("HGET", ls.hh, "l")
    ls.t, ls.had = now, v ~= false
    if v and tonumber(v) > now then ls.t = tonumber(v) end
    if v and tonumber(v) < ls.t then redis.call("HSET", ls.hh, "l", dec(ls.t)) end -- as LA
    redis.call("ZREMRANGEBYSCORE", ls.hl, "-inf", ls.t)
    ls.n = redis.call("ZCARD", ls.hl)
    local function score(i)
        return tonumber(redis.call("ZRANGE", ls.hl, i, i, "WITHSCORES")[2])
    end
    if ls.n >= ls.max then -- full (n > 0): until the oldest expires
        ls.room = false
        ls.ans = {0, ls.max, 0, score(0) - ls.t, score(-1) - ls.t, 0}
    else -- what a take answers (a look too: the local backend's take given back)
        local last = ls.t + ls.ttl
        if ls.n > 0 and score(-1) > last then last = score(-1) end
        ls.room = true
        ls.ans = {1, ls.max, ls.max - ls.n - 1, 0, last - ls.t, 0}
    end
end

-- Takes lease ls (looked at, with room): its id, as op LA makes it.
local function lease_take(ls, client_time)
    local hh, t = ls.hh, ls.t
    if redis.call("HEXISTS", hh, "n") == 0 then
        local tm = redis.call("TIME")
        redis.call("HSET", hh, "n", dec(tonumber(tm[1]) * 1000000 + tonumber(tm[2])))
    end
    local id = redis.call("HINCRBY", hh, "n", 1)
    local exp = t + ls.ttl
    redis.call("ZADD", ls.hl, exp, dec(id))
    redis.call("HSET", hh, "l", dec(t))
    for _, key in ipairs({ls.hl, hh}) do -- never shortened, an hour with client time
        local ms = exp - t
        if client_time and ms < HOUR_MS then ms = HOUR_MS end
        if redis.call("PTTL", key) < ms then redis.call("PEXPIRE", key, ms) end
    end
    return id
end

local function check(now, client_time)
    local m = int_arg(3, "the number of counters")
    local np = int_arg(4, "pool") ~= 0 and 1 or 0
    if m < 0 or m > MAX_BATCH or #KEYS < m + np then
        refuse("args: op C with " .. #KEYS .. " keys for " .. dec(m) .. " counters")
    end
    local lbase = 8 + 12 * m + 7 * np -- nl's place
    local nl = tonumber(ARGV[lbase])
    if nl == nil or nl ~= floor(nl) or nl < 0 or nl > MAX_BATCH or #KEYS ~= m + np + 2 * nl or
        #ARGV ~= lbase + 4 * nl then
        refuse("args: op C with " .. #KEYS .. " keys and " .. #ARGV .. " arguments for " ..
               dec(m) .. " counters")
    end
    local denied = int_arg(5, "denied_never") ~= 0
    local qall, qover = int_arg(6, "qall"), int_arg(7, "zmask")
    local it = {}
    for i = 1, m do
        local base = 7 + (i - 1) * 12
        local t = {key = KEYS[i], n = fields(base, i)}
        t.shadow = int_arg(base + 8, "shadow of key " .. i) ~= 0
        t.quota = int_arg(base + 9, "quota of key " .. i) ~= 0
        t.lyft = int_arg(base + 10, "lyft of key " .. i) ~= 0
        t.ceil = int_arg(base + 11, "ceiling of key " .. i)
        t.qmask = int_arg(base + 12, "qmask of key " .. i)
        -- every parameter a round may use, checked before anything is written
        if t.ceil > 0 then t.up = with_limit(t.n, t.ceil) end
        if t.lyft then t.big = with_limit(t.n, MAX_LIMIT) end
        it[i] = t
    end
    local pool
    if np == 1 then pool = {key = KEYS[m + 1], n = fields(7 + 12 * m, m + 1)} end
    local leases = {}
    for j = 1, nl do
        local b = lbase + 4 * (j - 1)
        local ls = {hh = KEYS[m + np + 2 * j - 1], hl = KEYS[m + np + 2 * j],
                    take = int_arg(b + 1, "take of lease " .. j) ~= 0,
                    shadow = int_arg(b + 2, "shadow of lease " .. j) ~= 0,
                    max = int_arg(b + 3, "max of lease " .. j),
                    ttl = int_arg(b + 4, "ttl of lease " .. j)}
        if ls.max < 1 or ls.max > 100000 or ls.ttl < 1 or ls.ttl > 86400000 then
            refuse("args: max or ttl of lease " .. j .. " out of range")
        end
        leases[j] = ls
    end
    -- The one refusal that depends on the state (a kept count of the
    -- previous window): found by a read before the first write.  Charges
    -- within this call never change a key's previous window.
    for i = 1, m do
        if it[i].n.algo == 2 then decide(it[i].key, it[i].n, now, false) end
    end

    -- Every lease set looked at (nothing taken yet); a full one that
    -- is not shadow denies: then every counter is only peeked.
    for j = 1, nl do
        lease_look(leases[j], now)
        if not leases[j].room and not leases[j].shadow then denied = true end
    end

    local res, stretched, decided = {}, {}, {}
    -- Marks the quota descriptors with a decided counter over; true when
    -- every quota descriptor is marked.
    local function quota_all_over()
        if qall == 0 then return false end
        for i = 1, m do
            if it[i].qmask ~= 0 and decided[i] and res[i][1] == 0 then
                qover = bit.bor(qover, it[i].qmask)
            end
        end
        return qover == qall
    end
    -- The reply, after every rate's write: an allowed request takes its
    -- leases now (every one had room), a denied one none.
    local function reply(allowed, quota_denied, pool_charged)
        local out = {allowed and 1 or 0, quota_denied and 1 or 0, pool_charged and 1 or 0}
        for i = 1, m do
            local r = res[i] or {0, 0, 0, 0, 0, 0}
            for k = 1, 6 do out[#out + 1] = r[k] end
            out[#out + 1] = stretched[i] and 1 or 0
        end
        for j = 1, nl do
            local ls = leases[j]
            local id = 0
            if allowed and ls.take and ls.room then id = lease_take(ls, client_time) end
            for k = 1, 6 do out[#out + 1] = ls.ans[k] end
            out[#out + 1] = id
        end
        return out
    end

    -- Lyft's counting: charged whatever the answer, then judged against L.
    local batch, idx = {}, {}
    for i = 1, m do
        if it[i].lyft then
            batch[#batch + 1] = {key = it[i].key, n = it[i].big}
            idx[#idx + 1] = i
        end
    end
    if #batch > 0 then
        local out = decide_all(batch, now, client_time)
        for q = 1, #batch do
            res[idx[q]] = lyft_answer(it[idx[q]].n, out[q])
            decided[idx[q]] = true
        end
    end

    -- Denied already: every other counter only peeked.
    for i = 1, m do
        local t = it[i]
        if t.lyft and not t.shadow and not t.quota and res[i][1] == 0 then denied = true end
    end
    local quota_denied = not denied and quota_all_over()
    if denied or quota_denied then
        for i = 1, m do
            local t = it[i]
            if not decided[i] then
                res[i] = decide(t.key, t.n, now, false)
                if res[i][1] == 0 and not t.shadow and not t.quota then quota_denied = false end
            end
        end
        return reply(false, quota_denied, false)
    end

    -- The enforced and quota counters all-or-none; a quota counter that
    -- denies leaves the batch and the rest is decided again.
    local allowed, enforced, pool_charged = false, false, false
    local outq = {}
    while true do
        batch, idx = {}, {}
        for i = 1, m do
            local t = it[i]
            if not (t.shadow or t.lyft or outq[i]) then
                batch[#batch + 1] = {key = t.key, n = t.n}
                idx[#idx + 1] = i
            end
        end
        if #batch == 0 then
            allowed = true
            break
        end
        enforced = true
        local out, all = decide_all(batch, now, client_time)
        for q = 1, #batch do
            res[idx[q]] = out[q]
            decided[idx[q]] = true
        end
        if all then
            allowed = true
            break
        end
        local hard, soft, quota = false, false, false
        for q = 1, #batch do
            local t = it[idx[q]]
            if out[q][1] == 0 then
                if t.quota then
                    quota = true
                elseif t.ceil > 0 then
                    soft = true
                else
                    hard = true
                end
            end
        end
        if hard then break end
        if quota then
            for q = 1, #batch do
                if out[q][1] == 0 and it[idx[q]].quota then outq[idx[q]] = true end
            end
            if quota_all_over() then
                quota_denied = true
                break
            end
        else
            -- Denied only by elastic limits: again with those at their
            -- ceilings and the spare pool as one more member.
            if soft and pool and #batch < MAX_BATCH then
                local b2 = {}
                for q = 1, #batch do
                    local t = it[idx[q]]
                    b2[q] = {key = t.key, n = (t.ceil > 0 and out[q][1] == 0) and t.up or t.n}
                end
                b2[#batch + 1] = {key = pool.key, n = pool.n}
                local out2, all2 = decide_all(b2, now, client_time)
                if all2 then
                    allowed, pool_charged = true, true
                    local left = out2[#batch + 1][3]
                    for q = 1, #batch do
                        local k = idx[q]
                        stretched[k] = res[k][1] == 0 -- over L before
                        res[k] = out2[q]
                        if stretched[k] and left < res[k][3] then res[k][3] = left end
                    end
                end
            end
            break
        end
    end

    -- Within every limit: the request still uses spare capacity.
    for i = 1, m do
        if it[i].lyft and not it[i].shadow then enforced = true end
    end
    if allowed and enforced and pool and not pool_charged then
        local ans, write = decide(pool.key, pool.n, now, true)
        write(ttl_of(ans, client_time))
    end

    -- Shadow counters: charged when the request is allowed, else peeked.
    for i = 1, m do
        local t = it[i]
        if t.shadow and not t.lyft then
            if allowed then
                local ans, write = decide(t.key, t.n, now, true)
                write(ttl_of(ans, client_time))
                res[i] = ans
            else
                res[i] = decide(t.key, t.n, now, false)
            end
        end
    end
    return reply(allowed, quota_denied, pool_charged)
end

local function main()
    local op, nowarg = ARGV[1], ARGV[2]
    local nkeys = #KEYS
    if op ~= "D" and op ~= "P" and op ~= "A" and op ~= "M" and op ~= "C" and op ~= "B" and
        op ~= "T" and op ~= "R" then
        refuse("args: unknown op '" .. tostring(op) .. "'")
    end
    if op == "T" or op == "R" then
        local want = op == "T" and 1 or 2
        if nkeys ~= 1 or #ARGV ~= 9 + want then
            refuse("args: op " .. op .. " takes 1 key and " .. (9 + want) .. " arguments")
        end
    elseif op == "B" then
        if nkeys < 1 or nkeys > MANY then refuse("args: op B with " .. nkeys .. " keys") end
        if #ARGV ~= 2 + 2 * nkeys then
            refuse("args: " .. #ARGV .. " arguments for " .. nkeys .. " keys")
        end
    elseif op ~= "C" then
        if nkeys < 1 or (op ~= "A" and op ~= "M" and nkeys ~= 1) or nkeys > (op == "M" and MANY or 16) then
            refuse("args: op " .. op .. " with " .. nkeys .. " keys")
        end
        if #ARGV ~= 2 + 7 * nkeys then refuse("args: " .. #ARGV .. " arguments for " .. nkeys .. " keys") end
    end
    local now
    local client_time = nowarg ~= ""
    if client_time then
        now = tonumber(nowarg)
        if now == nil or now ~= floor(now) then refuse("args: now '" .. nowarg .. "' is not an integer") end
        if now >= TWO53 or now <= -TWO53 then
            refuse("range: |now| = " .. string.gsub(nowarg, "^-", "") .. RANGE_TAIL)
        end
    else
        local tm = redis.call("TIME")
        now = tonumber(tm[1]) * 1000 + floor(tonumber(tm[2]) / 1000)
    end
    if op == "M" then return many(nkeys, now, client_time) end
    if op == "B" then return batch(nkeys, now, client_time) end
    if op == "C" then return check(now, client_time) end
    local reqs = {}
    for i = 1, nkeys do
        reqs[i] = request(i)
        for j = 1, i - 1 do
            if KEYS[j] == KEYS[i] then refuse("args: key " .. i .. " repeats key " .. j) end
        end
    end

    if op == "P" then
        return (decide(KEYS[1], reqs[1], now, false))
    end
    if op == "D" then
        local ans, write = decide(KEYS[1], reqs[1], now, true)
        write(ttl_of(ans, client_time))
        return ans
    end
    if op == "T" then
        -- T: D, and up to want - cost more units leased to the caller.
        -- Reply: the six fields, then extra, ttl (ms the lease may be spent,
        -- from this call's time), tag (window or epoch: R's).
        local lease = {op = "T", want = int_arg(10, "want")}
        local ans, write = decide(KEYS[1], reqs[1], now, true, lease)
        write(ttl_of(ans, client_time))
        return {ans[1], ans[2], ans[3], ans[4], ans[5], ans[6], lease.extra or 0,
                lease.ttl or 0, lease.tag or 0}
    end
    if op == "R" then
        -- R: hands back `cost` unspent units of a lease of `taken` units
        -- taken with `tag`; too late (another window, a settled epoch),
        -- nothing.  Reply: the units put back.
        local lease = {op = "R", back = reqs[1].cost, taken = int_arg(10, "taken"),
                       tag = int_arg(11, "tag")}
        local n = reqs[1]
        n.cost = 0
        local ans, write = decide(KEYS[1], n, now, true, lease)
        write(ttl_of(ans, client_time))
        return lease.back or 0
    end
    -- A: every answer first without charging; all charged only if all pass.
    local list = {}
    for i = 1, nkeys do list[i] = {key = KEYS[i], n = reqs[i]} end
    local res, all = decide_all(list, now, client_time)
    local out = {all and 1 or 0}
    for i = 1, nkeys do
        for k = 1, 6 do out[1 + (i - 1) * 6 + k] = res[i][k] end
    end
    return out
end

-- ---- holds: leases and reservations (SPEC 10, docs/commands-holds.md) ----
-- Four ops of their own, dispatched before main's (below), each with
-- ARGV[2] the time as every op takes it:
--   LA now max ttl                  KEYS hh hl           acquire a lease
--   LR now id                       KEYS hh hl           release one
--   RV now algo L W B P lr estimate KEYS hh hr rate      reserve
--   ST now id actual                KEYS hh hr r0 .. r6  settle (ri: algo i's state)
-- hh, a hash: "n" the last id given (seeded from Redis's TIME in us when
-- absent, so a key made again gives ids above its old ones), "l" and "r"
-- the leases' and reservations' clock (kept while that kind has entries),
-- and one field per reservation, its id -> "exp at estimate algo L W B P lr".
-- hl: the leases, a sorted set id -> expiry; hr: the reservations' ids by
-- expiry.  An entry is live at t while t < its expiry.  The whole of it is
-- one closure made only when a hold op runs (decisions do not pay for it).
local function holds(op)
    local U40 = 1099511627775 -- a window's count saturates there, as engine.c's u40
    local SBMAX = 17592186044416 -- 2^44: a sliding-buckets counter's bound here (> any L)
    local RECLAIM = 100 -- expired reservations dropped per call at most
    local nowarg = ARGV[2]
    local client_time = nowarg ~= ""
    local now
    if client_time then
        now = tonumber(nowarg)
        if now == nil or now ~= floor(now) then refuse("args: now '" .. nowarg .. "' is not an integer") end
        if now >= TWO53 or now <= -TWO53 then
            refuse("range: |now| = " .. string.gsub(nowarg, "^-", "") .. RANGE_TAIL)
        end
    else
        local tm = redis.call("TIME")
        now = tonumber(tm[1]) * 1000 + floor(tonumber(tm[2]) / 1000)
    end
    local want = {LA = 4, LR = 3, RV = 9, ST = 4}
    local nk = {LA = 2, LR = 2, RV = 3, ST = 9}
    if #ARGV ~= want[op] or #KEYS ~= nk[op] then
        refuse("args: op " .. op .. " takes " .. nk[op] .. " keys and " .. want[op] .. " arguments")
    end
    local hh = KEYS[1]

    -- the kind's clock c ("l" or "r") moved to now: t = max(now, clock)
    local function clock_of(c)
        local v = redis.call("HGET", hh, c)
        if v and tonumber(v) > now then return tonumber(v), true end
        return now, v ~= false
    end
    -- key's expiry: never shortened, at least ms (an hour with client time)
    local function keep(key, ms)
        if ms < 1 then ms = 1 end
        if client_time and ms < HOUR_MS then ms = HOUR_MS end
        if redis.call("PTTL", key) < ms then redis.call("PEXPIRE", key, ms) end
    end
    local function next_id()
        if redis.call("HEXISTS", hh, "n") == 0 then
            local tm = redis.call("TIME")
            redis.call("HSET", hh, "n", dec(tonumber(tm[1]) * 1000000 + tonumber(tm[2])))
        end
        return redis.call("HINCRBY", hh, "n", 1)
    end
    -- an id as the C side sends it, or nil (then unknown)
    local function id_arg(i)
        local s = ARGV[i]
        if #s > 16 or not smatch(s, "^[1-9]%d*$") then return nil end
        return s
    end
    local function score(key, i)
        local z = redis.call("ZRANGE", key, i, i, "WITHSCORES")
        return tonumber(z[2])
    end

    if op == "LA" then
        local max, ttl = int_arg(3, "max"), int_arg(4, "ttl")
        if max < 1 or ttl < 1 then refuse("args: max or ttl out of range") end
        local hl = KEYS[2]
        local t, had = clock_of("l")
        redis.call("ZREMRANGEBYSCORE", hl, "-inf", t)
        local n = redis.call("ZCARD", hl)
        if n >= max then -- denied (n > 0): until the oldest expires
            redis.call("HSET", hh, "l", dec(t))
            return {0, max, 0, score(hl, 0) - t, score(hl, -1) - t, 0, 0}
        end
        local id, exp = next_id(), t + ttl
        local last = exp
        if n > 0 and score(hl, -1) > last then last = score(hl, -1) end
        redis.call("ZADD", hl, exp, dec(id))
        redis.call("HSET", hh, "l", dec(t))
        keep(hl, exp - t)
        keep(hh, exp - t)
        return {1, max, max - n - 1, 0, last - t, 0, id}
    end

    if op == "LR" then
        local hl = KEYS[2]
        local t, had = clock_of("l")
        if not had then return 0 end -- no leases: nothing held, nothing written
        redis.call("ZREMRANGEBYSCORE", hl, "-inf", t)
        local id, gone = id_arg(3), 0
        if id then gone = redis.call("ZREM", hl, id) end
        if redis.call("ZCARD", hl) == 0 then
            redis.call("HDEL", hh, "l")
        else
            redis.call("HSET", hh, "l", dec(t))
        end
        return gone
    end

    local hr = KEYS[2]
    -- drops up to RECLAIM reservations expired at t (their charge stays)
    local function reclaim(t)
        local ids = redis.call("ZRANGEBYSCORE", hr, "-inf", t, "LIMIT", 0, RECLAIM)
        if #ids > 0 then
            redis.call("ZREM", hr, unpack(ids))
            redis.call("HDEL", hh, unpack(ids))
        end
    end
    -- the kind's clock kept while it has entries (as the local table's group)
    local function set_clock(t)
        if redis.call("ZCARD", hr) == 0 then
            redis.call("HDEL", hh, "r")
        else
            redis.call("HSET", hh, "r", dec(t))
        end
    end

    if op == "RV" then
        local n = fields(2, 1)
        if n.algo == 1 then refuse("args: sliding-log is not reserved") end
        local rate = KEYS[3]
        local t = clock_of("r")
        local ans, write = decide(rate, n, t, true) -- refusals: before any write
        reclaim(t)
        write(ttl_of(ans, client_time))
        if ans[1] == 0 then
            set_clock(t)
            ans[7] = 0
            return ans
        end
        local id, exp = next_id(), t + n.W
        -- "exp at estimate algo L W B P lr"
        local rec = {dec(exp), dec(t), ARGV[9], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]}
        redis.call("HSET", hh, dec(id), table.concat(rec, " "), "r", dec(t))
        redis.call("ZADD", hr, exp, dec(id))
        keep(hr, exp - t)
        keep(hh, exp - t)
        ans[7] = id
        return ans
    end

    -- ST: the reservation's actual - estimate charged or refunded on its
    -- key's state (engine.c's sl__engine_adjust, step for step)
    local actual = int_arg(4, "actual")
    if actual < 0 then refuse("args: actual out of range") end
    local t, had = clock_of("r")
    if not had then return {0} end
    local id = id_arg(3)
    local rec = id and redis.call("HGET", hh, id)
    local v
    if rec then v = parse_ints(rec) end
    if v == nil or v[1] <= t then -- unknown, settled, or its window ended
        reclaim(t)
        set_clock(t)
        return {0}
    end
    local at, est = v[2], v[3]
    local n = make_request(v[4], v[5], v[6], v[7], v[8], v[9], 0, 1)
    local a, W = n.algo, n.W
    local key = KEYS[3 + a]
    local delta = actual - est
    local s = redis.call("GET", key)
    local str = s
    if s or delta > 0 then
        local st, clock_old, tt, tail, O = split_state(s, t, a)
        local new, mag = nil, delta < 0 and -delta or delta
        if a == 0 then
            local _, nw = fixed_window(st, n, clock_old, tt, 0)
            local count = nw[1]
            if delta > 0 then
                count = count + delta
                if count > U40 then count = U40 end
            elseif fdiv(at, W) == fdiv(tt, W) then
                if mag > count then mag = count end
                count = count - mag
            end
            new = {count}
        elseif a == 2 then
            local _, nw = sliding_window(st, n, clock_old, tt, 0)
            local i = fdiv(tt, W)
            if delta > 0 then
                nw[1] = nw[1] + delta
                if nw[1] > U40 then nw[1] = U40 end
            else
                local ic, k = fdiv(at, W), nil
                if ic == i then k = 1 elseif ic == i - 1 then k = 2 end
                if k then
                    if mag > nw[k] then mag = nw[k] end
                    nw[k] = nw[k] - mag
                end
            end
            new = nw
        elseif a == 3 then
            local _, nw = sliding_buckets(st, n, clock_old, tt, 0, true)
            local P = n.P
            local g = W / P
            local b = fdiv(tt, g)
            local j
            if delta > 0 then
                local _, jj = fdiv(b, P)
                j = jj
            else
                local bc = fdiv(at, g)
                if bc > b - P and bc <= b then
                    local _, jj = fdiv(bc, P)
                    j = jj
                end
            end
            if j then
                local c = nw[3 + j]
                local c2 = c + delta
                if delta > 0 and c2 > SBMAX then c2 = SBMAX end
                if c2 < 0 then c2 = 0 end
                nw[3 + j] = c2
                nw[2] = nw[2] + c2 - c
            end
            new = nw
        else
            local mode = a == 4 and 0 or (a == 5 and 2 or 1)
            local _, _, d = bucket(st, n, mode, clock_old, tt, 0, O)
            if delta > 0 then -- past empty: a debt, saturated as the engine's
                local dmax = bucket_dmax(n)
                if mag <= fdiv((dmax or TWO53) - d, W) then
                    d = d + mag * W
                elseif dmax then
                    d = dmax
                else
                    refuse("range: B*W + the bucket's debt after the settle = " .. dec(d) ..
                           " + " .. mulstr(mag, W) .. RANGE_TAIL)
                end
            else
                local low = O * W
                if low > d then low = d end
                if mag >= cdiv(d - low, W) then d = low else d = d - mag * W end
            end
            new = bucket_state(n, mode, d)
            if tail and O > 0 then new[3], new[4], new[5] = tail[1], tail[2], tail[3] end
        end
        table.insert(new, 1, tt)
        str = join_ints(new)
    end
    -- the answer of the state as it now stands (a request of cost 0), and
    -- whether a request of cost 1 would pass (sl_charge's answer_after)
    pre = {[key] = str or false}
    local ans0, write = decide(key, n, t, str ~= nil)
    local n1 = {}
    for k2, x in pairs(n) do n1[k2] = x end
    n1.cost = 1
    local ans1 = decide(key, n1, t, false)
    pre = nil
    reclaim(t)
    redis.call("HDEL", hh, id)
    redis.call("ZREM", hr, id)
    set_clock(t)
    if str ~= nil then write(ttl_of(ans0, client_time)) end
    return {1, ans1[1], ans0[2], ans0[3], ans1[4], ans0[5], 0}
end

do
    local decisions = main
    main = function()
        local op = ARGV[1]
        if op == "LA" or op == "LR" or op == "RV" or op == "ST" then return holds(op) end
        if op == "F" then
            -- F: FORGET, the DEL of a key's every algorithm, through the
            -- script so that it keeps its place among the calls around it
            -- when Redis lost the script (NOSCRIPT: they are all sent again
            -- in order).  Reply: DEL's, the keys that existed.
            if #KEYS < 1 or #KEYS > 7 or #ARGV ~= 1 then
                refuse("args: op F takes 1 to 7 keys and no other argument")
            end
            return redis.call("DEL", unpack(KEYS))
        end
        return decisions()
    end
end

local ok, res = pcall(main)
if ok then return res end
if type(res) == "table" and res.sluice then return redis.error_reply("SLUICE " .. res.sluice) end
-- Redis's own refusal of a command (OOM, READONLY, ...) as Redis wrote it
if type(res) == "table" and res.err then return redis.error_reply(res.err) end
error(res, 0)
