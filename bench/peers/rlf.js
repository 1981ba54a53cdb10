// bench/peers/rlf.js -- rate-limiter-flexible's in-process limiter
// (RateLimiterMemory) doing bench/bench's throughput run: token bucket-like
// points per window, one thread, keys "user:NNNNNN" drawn at random from a
// set of KEYS keys (1,000 hot or 1,000,000), each key made once first.
//
//   node rlf.js KEYS SECONDS MODE [WINDOW_S]
//
// MODE "await": one `await consume(key)` a decision, what a request handler
// does; MODE "batch": 256 consume() calls, then one await of them all (the
// peer's best case: its promises resolve together).  Prints one line of
// JSON: {"keys", "mode", "decisions", "seconds", "mdps", "allowed"}.
// The limits are bench/bench's: 4,000 points a 1-second window (the peer's
// `duration` is in seconds), so nearly every decision is allowed.  WINDOW_S
// (default 1) scales both: 60 gives 240,000 points a minute, under which the
// peer keeps a key between its visits at 1M keys (with 1 s it forgets each
// key, a timer each, before it comes again: see bench/README.md).
// Bounded: at most SECONDS seconds and 200,000,000 decisions a run.
'use strict';
const { RateLimiterMemory } = require('rate-limiter-flexible');

const KEYS = Number(process.argv[2] || 1000);
const SECONDS = Number(process.argv[3] || 1);
const MODE = process.argv[4] || 'await';
const WINDOW_S = Number(process.argv[5] || 1);
const MAX_DECISIONS = 200000000;
const IDX = 1 << 22;
const BATCH = 256;

// bench/bench's xorshift and rng_below, so the draw of keys is the same kind
function makeIndex(n) {
    const idx = new Uint32Array(IDX);
    let s = 0x9E3779B97F4A7C15n;
    const M = (1n << 64n) - 1n;
    for (let i = 0; i < IDX; i++) {
        s ^= s >> 12n;
        s = (s ^ (s << 25n)) & M;
        s ^= s >> 27n;
        const x = (s * 0x2545F4914F6CDD1Dn) & M;
        idx[i] = Number(((x >> 32n) * BigInt(n)) >> 32n);
    }
    return idx;
}

async function main() {
    const keys = new Array(KEYS);
    for (let i = 0; i < KEYS; i++) keys[i] = 'user:' + String(i).padStart(6, '0');
    const idx = makeIndex(KEYS);
    const rl = new RateLimiterMemory({ points: 4000 * WINDOW_S, duration: WINDOW_S });
    let allowed = 0;
    const take = (p) => p.then(() => { allowed++; }, () => {});
    // warm-up: every key once, in key order (as bench/bench's warm)
    for (let i = 0; i < KEYS; i += BATCH) {
        const ps = [];
        for (let j = i; j < i + BATCH && j < KEYS; j++) ps.push(take(rl.consume(keys[j], 1)));
        await Promise.all(ps);
    }
    allowed = 0;
    let n = 0, pos = 0;
    const t0 = process.hrtime.bigint();
    const limitNs = BigInt(Math.round(SECONDS * 1e9));
    for (;;) {
        if (MODE === 'batch') {
            for (let k = 0; k < 4; k++) {
                const ps = new Array(BATCH);
                for (let j = 0; j < BATCH; j++) ps[j] = take(rl.consume(keys[idx[pos++ & (IDX - 1)]], 1));
                await Promise.all(ps);
            }
            n += 4 * BATCH;
        } else {
            for (let j = 0; j < 1024; j++) {
                try {
                    await rl.consume(keys[idx[pos++ & (IDX - 1)]], 1);
                    allowed++;
                } catch (e) {
                    if (e instanceof Error) throw e;
                }
            }
            n += 1024;
        }
        const dt = process.hrtime.bigint() - t0;
        if (dt >= limitNs || n >= MAX_DECISIONS) {
            const secs = Number(dt) / 1e9;
            process.stdout.write(JSON.stringify({
                keys: KEYS, mode: MODE, decisions: n, seconds: secs,
                mdps: n / secs / 1e6, allowed: allowed / n,
            }) + '\n');
            return;
        }
    }
}

main().catch((e) => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(1); });
