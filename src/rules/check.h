/*
 * check.h -- RL.CHECK's evaluation: the descriptors of one request matched
 * against a rule set (rules.h) and decided all-or-none.  No server, no
 * RESP, no store: this layer plans a request and reports its outcome; a
 * backend (src/backend/) executes the plan where the counters live.
 *
 * Semantics (docs/rules.md, "For RL.CHECK"):
 *
 *   - Each descriptor is matched on its own with sl_rules_match.  Every limit
 *     of every matched node, across all descriptors of the request, is one
 *     counter; the enforced ones are decided together in ONE sl_decide_all:
 *     the request passes only if every limit passes, and then all are
 *     charged; otherwise none is (a request denied by one descriptor is not
 *     charged to the others, nor to the other limits of its own descriptor).
 *   - No rule (unknown domain, no match, node without limits, more than
 *     SL_RULES_MAX_DEPTH entries): NO_RULE,
 *     allowed, nothing counted; the status's numbers are all 0.
 *   - `unlimited`: UNLIMITED, allowed, nothing counted; numbers all 0.  (A
 *     node mixing unlimited and counted limits is decided on the counted
 *     ones only.)
 *   - requests_per_unit 0: OVER_LIMIT "never" without calling the engine:
 *     limit 0, remaining 0, retry_after_ms -1, reset_after_ms 0.  The
 *     whole request is then denied, so the other limits are only peeked.
 *   - `soft: N%`: decided with L = soft_limit (L + floor(L*N/100)); the
 *     status's `limit` is that effective limit, as the engine reports it.
 *   - `shadow_mode`: such limits never deny and never block the batch.
 *     They are kept OUT of the sl_decide_all and decided with their own
 *     sl_decide after the batch is known: charged (sl_decide) when the
 *     request is allowed, only peeked when it is denied (not charged, as
 *     for any descriptor of a denied request).  Like every sluice counter,
 *     a shadow counter is charged only when within its limit; beyond it the
 *     engine charges nothing and the status is SHADOW.  The shadow decides
 *     are not atomic with the batch -- they cannot change the answer.
 *   - `elastic` (window algorithms only; the loader refuses the others):
 *     with a spare-capacity pool (`--capacity N/W`, a fixed-window counter
 *     under the key "|spare-capacity", which no rule key can be), every
 *     allowed request that counted some non-shadow limit (enforced or
 *     quota) also charges the
 *     pool its cost (best effort: a full pool is not charged further and
 *     denies nothing by itself).  When the batch is denied ONLY by elastic
 *     limits, it is decided once more, all-or-none, with those limits at
 *     their ceilings (elastic_limit) and the pool as one more member: it
 *     passes only if every limit passes at its ceiling AND the pool has
 *     room for the cost, and then all are charged.  A limit that was over
 *     L and passed this way reports ELASTIC, with the engine's numbers at
 *     the ceiling (limit = the ceiling) except remaining = the smaller of
 *     the ceiling's and the pool's.  If the second try fails, the answer
 *     is the first one's (at L).  Without a pool (NULL) an elastic limit
 *     is a plain limit at L.
 *   - `quota_mode` (Lyft): a descriptor whose node is in quota mode (and
 *     not in shadow mode) holds "quota" counters.  Over its limit, such a
 *     descriptor does not deny: the request is denied only when some
 *     enforced counter denies, or when EVERY quota-mode descriptor of the
 *     request is over (then those descriptors answer OVER_LIMIT and the
 *     overall answer is the one with the SMALLEST retry_after, -1 the
 *     largest: the first to have room again lets the request pass).
 *     Quota counters are decided all-or-none with the enforced ones; one
 *     that denies leaves the batch (its descriptor answers OVER_QUOTA,
 *     with the numbers a hard limit would answer) and the rest is decided
 *     again, until it passes or cannot: at most one round more than there
 *     are quota counters.  So a quota counter is charged only when the
 *     request passes and it has room, like a shadow one.
 *   - SL_RULES_COUNT_DENIED (sluiced --count-denied, Lyft's counting): every
 *     fixed-window counter that is not elastic (with a pool) is charged the
 *     request's cost on EVERY request, allowed or denied, as Lyft's INCRBY
 *     does, and then judged against its limit: over when the count after
 *     the charge exceeds L (the status: limit L, remaining L - count or 0,
 *     retry_after the window's end, or -1 when cost > L).  Shadow and quota
 *     counters too.  The other counters (other algorithms, elastic ones)
 *     keep the all-or-none rule and are charged only when the request
 *     passes; a request already denied by a Lyft-counted counter only peeks
 *     them.
 *     The same for ONE request when its input asks (sl_check_input.lyft:
 *     the gRPC front answering as envoyproxy/ratelimit), whatever the
 *     set's flag.  A Lyft-counted counter given cost 0 charges nothing and
 *     is judged as it stands: one already over L answers OVER_LIMIT (Lyft's
 *     INCRBY 0, then after > L), one at exactly L answers OK, remaining 0.
 *   - Costs: one `cost` for every descriptor, or each descriptor its own
 *     (sl_check_input.costs: Envoy's per-descriptor hits_addend).  Cost 0
 *     peeks: nothing is charged, the answer is the counter's as it stands.
 *     Repeated counters add their descriptors' costs.  The pool (elastic)
 *     is charged the largest cost of a non-shadow counted descriptor --
 *     once a request, as with one cost.
 *   - `replaces` (Lyft): a named limit that another limit matched by the
 *     same request lists under `replaces` is not applied: not decided, not
 *     charged.  A descriptor whose every counted limit is replaced answers
 *     OK, with the (first) replaced limit's name and every number 0, as
 *     Lyft answers a replaced limit; its status says `replaced` (a front
 *     answering as Lyft then shows no limit at all).
 *   - The same counter named twice in one request (two descriptors with the
 *     same entries) is one sl_request with the costs added (sl_decide_all
 *     refuses repeated keys); both descriptors report its answer.
 *   - At most SL_MAX_BATCH counted limits (enforced + shadow) per request;
 *     more is an error.  At most SL_CHECK_MAX_DESC descriptors (a front
 *     with more splits them or refuses); a descriptor may have ANY number
 *     of entries (at least 1): one deeper than SL_RULES_MAX_DEPTH matches
 *     no rule (rules never nest deeper), so it is NO_RULE -- unless it has
 *     a limit override, which counts it by all its entries.  The fronts
 *     that refuse deeper descriptors (RESP, HTTP: sl_check_shape_entries)
 *     do so themselves.
 *   - Long keys.  A counting key (a rule's, sl_rules_key, or an
 *     override's, sl_rules_override_key) longer than SL_MAX_KEY bytes is
 *     not refused: it is kept in the digest form, exactly SL_MAX_KEY bytes:
 *     its first SL_RULES_KEY_PREFIX (446) bytes, readable, then "#~", then
 *     64 lowercase hex digits: SipHash-2-4-128 of the WHOLE key under the
 *     fixed key "sluice/keys/no.1", then under "sluice/keys/no.2" (256
 *     bits; src/lib/siphash.h).  No short key can take this form ("#~"
 *     never occurs in a key as built: a '#' there is either escaped, %23,
 *     or the separator before the window's digits or "override/"; and a
 *     long key's suffix lies past its prefix).  Two long keys share a counter
 *     only if both 128-bit halves collide at once.  Why that is safe
 *     enough: the SipHash keys are public, so this is not a keyed PRF but
 *     a fixed 256-bit function; no way to find SipHash-2-4 collisions
 *     faster than by chance is known, and by chance two colliding long
 *     keys take about 2^64 tries for one half alone and, as both halves
 *     run over the same input with independent keys, far more for both
 *     -- while what a collision gains is only that two clients share one
 *     counter (no memory, no bypass of an unrelated limit).  No new
 *     dependency: SHA-256 is in libcrypto, which the rules layer (and
 *     sluicectl) do not link.  The form must never change: counters kept
 *     in a snapshot or in Redis are named by it.
 *     The hash tag (below) of every counter of a domain is the domain's
 *     first SL_RULES_KEY_PREFIX bytes at most, so long keys and short
 *     ones of one domain still share it.
 *   - A limit override (sl_check_override, Envoy's RateLimitDescriptor.limit,
 *     as envoyproxy/ratelimit applies it): a descriptor given one, in a
 *     domain the rules define, is decided with that limit alone -- a fixed
 *     window of `limit` per `unit` (Lyft's fixed lengths) -- whether or
 *     not a rule matches it; the rules' node is not consulted (no shadow,
 *     quota, soft, elastic, `replaces` or per-rule statistics).  In a
 *     domain the rules do not define it is NO_RULE, as any descriptor
 *     there.  Its counter's key is the request's entries and the unit's
 *     window (sl_rules_override_key), not the limit: requests naming the
 *     same entries and unit share one count whatever limit each gives
 *     (envoyproxy/ratelimit's cache key), and an override never shares a
 *     rule's counter.  limit 0 is OVER_LIMIT "never", as a rule's.  The
 *     reported limit has the name "" (envoyproxy/ratelimit's).
 *   - `concurrency: N` (sl_check_input.conc, sl_check_conc): with LEASE, one
 *     lease per distinct lease key (plan->leases), decided all-or-none with
 *     the rates by the executor (the local backend takes the enforced
 *     leases first, decides the rates -- only peeked when a lease was
 *     refused -- and gives the leases back when anything denied); the
 *     lease is one more limit of its descriptor's status, named
 *     "<path>#concurrency" (plan->lim).  Shadow: taken only when the
 *     request passed and one is free, else SHADOW.  Cost 0: looked at,
 *     not kept.  quota_mode with concurrency: refused.
 *   - Every counter, the pool's included, lives in key space 1 of the store
 *     (sl_params.space): RL.ALLOW, RL.PEEK and RL.RESET, which use space 0,
 *     can neither charge nor clear a rule's counter, whatever key they name.
 *
 * A descriptor's status:
 *   OVER_LIMIT  one of its enforced limits denies; reported: the denied
 *               limit with the largest retry_after (-1, never, is largest),
 *               on equal retries the one with the largest reset_after.
 *   SHADOW      its node is in shadow mode and one of its limits is over;
 *               reported: that limit (largest retry_after), with the
 *               numbers a hard limit would answer (retry_after > 0).
 *   OVER_QUOTA  its node is in quota mode, one of its limits is over, and
 *               the request was not denied for every quota descriptor being
 *               over; reported as SHADOW is.
 *   ELASTIC     allowed, and one of its limits passed above L on the pool;
 *               reported: that limit (smallest remaining, then largest
 *               reset_after).
 *   OK          reported: the limit with the smallest remaining; on equal
 *               remaining the one with the largest reset_after (2 a minute
 *               and 5 an hour, both with 0 left: the hour's, the one the
 *               next request waits for); first on full ties.  When the request is denied by another descriptor,
 *               an OK descriptor was not charged: its numbers are the
 *               engine's answer for it alone (a peek of `cost`), so, as in
 *               every engine answer, `remaining` is what would be left
 *               after it -- not the counter's current room.
 *
 * The overall answer (SPEC §3's six fields) counts enforced limits only --
 * shadow-mode descriptors never change what the client sees:
 *   denied  (some OVER_LIMIT): the result of the OVER_LIMIT descriptor with
 *           the largest retry_after (-1 if any is never), on equal retries
 *           the largest reset_after; allowed = 0, delay_ms = 0.  When
 *           only quota descriptors are OVER_LIMIT (every one was over), the
 *           one with the smallest retry_after instead (-1 only if all are;
 *           on equal retries the largest reset_after).  So reset_after >=
 *           retry_after: no field tells a time before which the request
 *           could pass.
 *   allowed: the result of the OK or ELASTIC, non-shadow descriptor with a
 *           counted limit and the smallest remaining, on equal remaining
 *           the largest reset_after (first on full ties); all zeros but
 *           allowed = 1 when no enforced limit applied (only NO_RULE /
 *           UNLIMITED / shadow / OVER_QUOTA).  limit, remaining and
 *           reset_after are that one limit's; delay_ms is the largest
 *           delay_ms of every non-shadow counter the request was charged
 *           to (leaky-bucket queues: the caller waits for the longest),
 *           whichever limit the other fields describe.
 */
#ifndef SLUICE_CHECK_H
#define SLUICE_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "rules.h"
#include "sluice.h"

typedef enum sl_check_code {
    SL_CHECK_OK = 0,
    SL_CHECK_OVER_LIMIT,
    SL_CHECK_SHADOW,  /* over the limit, but the rule is in shadow mode: allowed */
    SL_CHECK_ELASTIC, /* above its own limit, allowed on the spare pool */
    SL_CHECK_UNLIMITED,
    SL_CHECK_NO_RULE,
    SL_CHECK_OVER_QUOTA /* over the limit, but the rule is in quota mode and another
                           quota descriptor of the request has room: allowed */
} sl_check_code;

/* Descriptors in one request: RL.CHECK's cap, and `sluicectl replay --rules`'s. */
#define SL_CHECK_MAX_DESC 16

/* The shape of an RL.CHECK request as RESP and HTTP take it: 1..
 * SL_CHECK_MAX_DESC descriptors (sl_check_shape_desc of their count), each
 * of 1..SL_RULES_MAX_DEPTH entries (sl_check_shape_entries).  Every such
 * front asks before it stores one more (a 17th descriptor is refused as it
 * comes) and words the answer its own way.  The plan asks again only for
 * the descriptors (1..SL_CHECK_MAX_DESC): it takes descriptors of any
 * depth (see "At most" above), for the gRPC front. */
typedef enum sl_check_shape {
    SL_CHECK_SHAPE_OK = 0,
    SL_CHECK_SHAPE_NONE, /* none at all */
    SL_CHECK_SHAPE_MANY  /* above the bound */
} sl_check_shape;

static inline sl_check_shape sl_check_shape_desc(int64_t n)
{
    return n <= 0                  ? SL_CHECK_SHAPE_NONE
           : n > SL_CHECK_MAX_DESC ? SL_CHECK_SHAPE_MANY
                                   : SL_CHECK_SHAPE_OK;
}

static inline sl_check_shape sl_check_shape_entries(int64_t n)
{
    return n <= 0                   ? SL_CHECK_SHAPE_NONE
           : n > SL_RULES_MAX_DEPTH ? SL_CHECK_SHAPE_MANY
                                    : SL_CHECK_SHAPE_OK;
}

/* "OK", "OVER_LIMIT", "SHADOW", "ELASTIC", "UNLIMITED", "NO_RULE", "OVER_QUOTA". */
const char *sl_check_code_name(sl_check_code c);

/* The status of one descriptor of the request. */
typedef struct sl_check_status {
    sl_check_code code;
    const char *name;           /* the reported limit's name; NULL for NO_RULE */
    const sl_rule_limit *rule;  /* the reported limit; NULL for NO_RULE */
    int shadow;                 /* 1 if the matched node is in shadow mode */
    int64_t limit;              /* the six fields of the status, as above */
    int64_t remaining;
    int64_t retry_after_ms;
    int64_t reset_after_ms;
    sl_result result;           /* the engine's full answer for the reported limit
                                   (allowed: that limit alone); zeros if none */
    const sl_rule_node *node;   /* the descriptor's matched node (lives as long as the
                                   set); NULL for NO_RULE and for a limit override */
    int replaced;               /* 1: every counted limit was replaced (`replaces`):
                                   OK, the replaced limit's name, numbers 0 */
    int quota;                  /* 1: the node is in quota mode, not in shadow mode,
                                   and the descriptor counted some limit (not
                                   unlimited, not replaced); whatever the code */
} sl_check_status;

/* Parses a spare-capacity pool, the value of `--capacity` (sluiced and
 * `sluicectl replay --rules`): "N/DURATION", e.g. "5000/1s" -- at most N
 * requests per DURATION (SPEC §1 durations) through all rules together.
 * Fills *pool (a fixed-window limit) and returns 0, or returns SL_EINVAL with
 * a message in err naming what is wrong. */
int sl_check_pool_parse(const char *s, sl_params *pool, char *err, size_t errlen);

/* ---- plan / execute / report -------------------------------------------
 *
 * An RL.CHECK is decided in three steps, so that the place where counters
 * live (the local store, or Redis) is one interface (src/backend/backend.h)
 * and everything else is pure:
 *
 *   1. sl_check_plan_make  (here, pure: rules in, no store): matches every
 *      descriptor, applies `replaces`, builds each counted limit's key and
 *      parameters, merges repeated counters' costs, and marks each counter
 *      shadow / quota / zero / elastic / lyft.  The plan lists every counter one request
 *      touches, with its hash tag (below).
 *   2. execution, by a backend (src/backend/): the local backend runs the
 *      rounds on its store (sl__local_check_exec: the Lyft-counted charges,
 *      peeks when the request is already denied, sl_decide_all rounds until
 *      the quota counters that deny are out, the elastic second round with
 *      the pool, the pool charge, the shadow decides) and fills an
 *      sl_check_outcome.
 *   3. sl_check_report (here, pure): turns plan + outcome into the six
 *      overall fields and each descriptor's status, as described above.
 *   sl_check_count adds the outcome to the per-limit counts (RL.RULES).
 *
 * Hash tag.  A backend that spreads counters over several servers (Redis
 * Cluster, a hash ring) can decide a request all-or-none in one atomic
 * step only if every counter of the request lives on one server.  A
 * counter's key cannot depend on the request (the same counter is shared
 * by every request that matches it), so the tag must be something all of
 * a request's counters share by construction: the DOMAIN.  Every counter
 * of one domain therefore carries the tag "domain" (item.taglen = the
 * domain's bytes at the start of the key, "domain|..."), which keeps every
 * RL.CHECK strict at the cost of one domain living on one server; see
 * docs/architecture.md ("The hash tag") for the alternatives weighed.
 */

/* What a plan does with a matched `concurrency: N` (sl_check_input.conc;
 * docs/rules.md, "Concurrency"):
 *   REFUSE (0, the default): the plan is refused, naming the rule -- for
 *          a caller that cannot take leases or hand their ids back (the
 *          Redis backend, forward-auth, `sluicectl replay`): a limit is
 *          never left unenforced silently;
 *   LEASE: one lease per distinct lease key (sl_check_plan.leases), taken
 *          all-or-none with the rate limits by the executor (the local
 *          backend: backend_local.c), its id handed back to the caller;
 *   RATES: the descriptor is answered by its rate limits alone (the gRPC
 *          front: Envoy's protocol has no place for a lease id); a node
 *          with only a concurrency limit is then NO_RULE. */
typedef enum sl_check_conc {
    SL_CHECK_CONC_REFUSE = 0,
    SL_CHECK_CONC_LEASE,
    SL_CHECK_CONC_RATES
} sl_check_conc;

/* The lease key's suffix: a descriptor's lease key is its counting key
 * without "#W" (sl_rules_key, limit -1) followed by "|conc" -- a part
 * without '=', which no rule key, override key or pool key has.  A key
 * that does not fit SL_MAX_KEY: the first SL_RULES_KEY_PREFIX - 5 bytes of
 * the descriptor's digest form, "|conc", "#~" and the digest's 64 hex
 * digits (the digest of the counting key: one per descriptor and values). */
#define SL_CHECK_LEASE_SUFFIX "|conc"
#define SL_CHECK_LEASE_NAME   160 /* bytes of a lease status's name, NUL included */

/* One concurrency limit of a request (conc LEASE). */
typedef struct sl_check_lease {
    int desc;             /* the (first) descriptor it serves */
    int lead;             /* index of the lease holding the key (itself unless
                             an earlier descriptor had the same key) */
    int shadow;           /* the node is in shadow mode: never denies */
    int take;             /* its descriptor's cost > 0: kept when the request
                             passes; 0: only looked at (taken and given back) */
    char key[SL_MAX_KEY]; /* the lease key (SL_CHECK_LEASE_SUFFIX) */
    size_t keylen;
} sl_check_lease;

/* One counted limit of a request. */
typedef struct sl_check_item {
    int desc;                /* descriptor index */
    const sl_rule_limit *rl; /* the limit (lives as long as the set) */
    sl_params p;             /* its parameters: space 1, L = soft_limit when soft */
    char key[SL_MAX_KEY];    /* the counting key (sl_rules_key) */
    size_t keylen;
    size_t taglen;           /* key[0..taglen): the hash tag (the domain) */
    int shadow;              /* node in shadow mode: never denies */
    int quota;               /* node in quota mode (and not shadow): denies only
                                with every other quota descriptor */
    int zero;                /* L = 0: denied, never; no backend call */
    int elastic;             /* may pass up to rl->elastic_limit (pool given) */
    int lyft;                /* SL_RULES_COUNT_DENIED: charged on every request,
                                then judged against L (fixed-window, not elastic) */
    int lead;                /* index of the item holding the counter (itself
                                unless the same counter came earlier) */
    int64_t cost;            /* leaders: the merged cost */
} sl_check_item;

/* A descriptor's limit given with the request instead of the rules'
 * (Envoy's RateLimitDescriptor.limit): see "A limit override" above. */
typedef struct sl_check_override {
    int64_t limit;     /* requests per unit: 0..SL_MAX_LIMIT (0: nothing passes) */
    sl_rule_unit unit; /* SL_UNIT_SECOND..SL_UNIT_YEAR; SL_UNIT_NONE: no override */
} sl_check_override;

/* Everything one RL.CHECK touches, built without a store.  Large (about
 * SL_MAX_BATCH * SL_MAX_KEY bytes): callers keep one per worker or per
 * request in flight, never on a small stack. */
typedef struct sl_check_plan {
    int n;                                 /* descriptors */
    int nitems;
    sl_check_item items[SL_MAX_BATCH];
    sl_check_status pre[SL_CHECK_MAX_DESC]; /* what matching alone decides:
                                               NO_RULE, UNLIMITED, or OK for a
                                               descriptor whose limits are all
                                               replaced; code/rule/name/shadow,
                                               node/replaced/quota */
    /* each descriptor's matched node, or NULL (NO_RULE) */
    const sl_rule_node *node[SL_CHECK_MAX_DESC];
    int nmetric;                           /* descriptors whose node names its statistics
                                              by the request's values (metric_dynamic:
                                              detailed_metric, value_to_metric); 0 for
                                              most requests */
    int denied_never;                      /* an enforced L = 0 limit matched */
    int nquota;                            /* descriptors holding quota counters */
    int has_pool;                          /* pool is set */
    sl_params pool;                        /* the spare-capacity pool, space 1 */
    int64_t cost, now_ms;
    /* the limits of the descriptors given an override (items point here:
     * they live as long as the plan; unused for the others) */
    sl_rule_limit over[SL_CHECK_MAX_DESC];
    /* conc LEASE: the request's concurrency limits, one per descriptor
     * with `concurrency` (followers: lead != index); lim[j] is lease j's
     * limit as a status reports it (name "<path>#concurrency" in name[j],
     * params.limit = N, params.window_ms = the lease's TTL) */
    int nleases;
    sl_check_lease leases[SL_CHECK_MAX_DESC];
    sl_rule_limit lim[SL_CHECK_MAX_DESC];
    char lname[SL_CHECK_MAX_DESC][SL_CHECK_LEASE_NAME];
} sl_check_plan;

/* What execution found.  res[k] is filled for leaders (item k with
 * lead == k) that are not zero; sl_check_report copies them to followers. */
typedef struct sl_check_outcome {
    int allowed;                        /* the request passed */
    int quota_denied;                   /* denied because every quota descriptor was over */
    int pool_charged;                   /* the elastic round passed on the pool */
    unsigned char stretched[SL_MAX_BATCH]; /* leader k passed above L, on the pool */
    sl_result res[SL_MAX_BATCH];
    /* leases (plan->nleases): lease j's answer (sl_acquire's; followers
     * are filled by sl_check_report) and its id, 0 when none is held
     * (denied, given back because the request was denied, only looked
     * at, or a follower) */
    sl_result lres[SL_CHECK_MAX_DESC];
    uint64_t lid[SL_CHECK_MAX_DESC];
} sl_check_outcome;

/* The pool's counter key (space 1).  No rule's key can be this: those
 * always hold '='. */
#define SL_CHECK_POOL_KEY "|spare-capacity"

/* One request to plan (sl_check_plan_build): everything it points to is
 * the caller's, read only during the call. */
typedef struct sl_check_input {
    const char *domain; /* dlen bytes */
    size_t dlen;
    int n;                             /* descriptors: 1..SL_CHECK_MAX_DESC */
    const sl_rule_entry *const *descs; /* descriptor i: its ndesc[i] (>= 1; 0 with an override) entries */
    const int *ndesc;
    const sl_check_override *over; /* descriptor i's limit override over[i]; NULL: none */
    int64_t cost;                  /* of every descriptor, when costs is NULL */
    const int64_t *costs;          /* descriptor i's own cost costs[i] (0..SL_MAX_LIMIT),
                                      or NULL: `cost` for all */
    int lyft;                      /* 1: Lyft's counting for this request (as
                                      SL_RULES_COUNT_DENIED), whatever the set's flags */
    const sl_params *pool;         /* the spare-capacity pool; NULL: none */
    int64_t now_ms;
    sl_check_conc conc;            /* a matched `concurrency`: refused (0), leases, or
                                      answered by its rates (sl_check_conc) */
} sl_check_input;

/* Plans one RL.CHECK request (the semantics above).  Refuses with a
 * negative SL_E* code and a message in err (may be NULL): a bad argument,
 * n outside 1..SL_CHECK_MAX_DESC, a descriptor without entries, a cost out
 * of range ("descriptor N: ..." for costs[]), a time out of range, a bad
 * override, more than SL_MAX_BATCH counted limits, the same counter with
 * different parameters, a merged cost above SL_MAX_LIMIT.  Never for a
 * key's length (long keys take the digest form) nor for a descriptor's
 * number of entries.  Pure: no store, no clock, no allocation; O(the
 * request's bytes + its descriptors' matching). */
int sl_check_plan_build(const sl_rules *r, const sl_check_input *in, sl_check_plan *plan, char *err,
                        size_t errlen);

/* Plans one RL.CHECK request: n (>= 1) descriptors, descriptor i being the
 * ndesc[i] (>= 1) entries descs[i], in `domain` (dlen
 * bytes), each of cost `cost` (0..SL_MAX_LIMIT) at now_ms, with the
 * spare-capacity pool `pool` (from sl_check_pool_parse; NULL = none:
 * elastic limits then never pass above their L).  Reads the request's
 * bytes only during the call: the plan holds copies of every key.
 *
 * Returns 0 with err "", or a negative SL_E* code with a message in err
 * (may be NULL) as sl_check_plan_build, which it calls (no override,
 * `cost` for every descriptor, the set's own counting). */
int sl_check_plan_make(const sl_rules *r, const sl_params *pool, const char *domain, size_t dlen,
                       const sl_rule_entry *const *descs, const int *ndesc, int n, int64_t cost,
                       int64_t now_ms, sl_check_plan *plan, char *err, size_t errlen);

/* As sl_check_plan_make, with over[i] the limit override of descriptor i
 * (over NULL, or an entry with unit SL_UNIT_NONE: none).  A unit out of
 * range or a limit above SL_MAX_LIMIT is SL_EINVAL "descriptor N: ...".
 * Kept for its callers: sl_check_plan_build with these inputs. */
int sl_check_plan_make_over(const sl_rules *r, const sl_params *pool, const char *domain,
                            size_t dlen, const sl_rule_entry *const *descs, const int *ndesc,
                            const sl_check_override *over, int n, int64_t cost, int64_t now_ms,
                            sl_check_plan *plan, char *err, size_t errlen);

/* Fills *overall and st[0..plan->n-1] from the plan and what execution
 * found (o: its followers' results are filled in here).  Pure. */
void sl_check_report(const sl_check_plan *plan, sl_check_outcome *o, sl_result *overall,
                     sl_check_status *st);

/* Is status a more restrictive than b, by the order the overall answer
 * uses: OVER_LIMIT before anything else; between two OVER_LIMIT the one
 * that holds the request longer (larger retry_after, -1 largest, then larger
 * reset_after); otherwise fewer remaining, then larger reset_after.  For a
 * front that shows one member per limit when one limit is reported by
 * several descriptors (docs/http.md): the member the client must obey. */
int sl_check_status_tighter(const sl_check_status *a, const sl_check_status *b);

/* Writes the printf-style message into err (when err is not NULL and
 * errlen > 0) and returns code: how this layer and the backends that run
 * its plans fail with a message. */
int sl__check_err(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Adds one decided request to the per-limit counts of its set (RL.RULES):
 * relaxed atomic adds, any thread. */
void sl_check_count(const sl_check_plan *plan, const sl_check_outcome *o);

#endif /* SLUICE_CHECK_H */
