/*
 * history.h -- what the status page (GET /, GET /v1/status) shows that the
 * counters alone do not: the recent past.
 *
 *   - per rule, decisions per second over the last SL_HISTORY_SECONDS:
 *     allowed, denied, shadow, elastic (a ring of seconds each), sampled
 *     once a second from the per-rule counters (stats.h) by a timer on the
 *     main thread's loop.  Bounded: SL_HISTORY_RULES rules have a series
 *     -- the ones with the most traffic; a rule busier in its latest
 *     second than the quietest tracked series over the whole ring takes
 *     that series' place (its earlier seconds then read 0).
 *   - every decision, rules or not, per second over the same ring:
 *     allowed and denied, sampled from the per-front counters (stats.h:
 *     every front's decisions summed) -- what the page shows when no rule
 *     decides (RL.ALLOW, GET /v1/allow) as well as when rules do.
 *   - the most-limited keys: the keys denied most often lately, a
 *     space-saving sketch (Metwally et al.) of SL_HISTORY_TOPK counters per
 *     worker, touched only on a denial, so an allowed request costs
 *     nothing.  "Lately": each worker keeps two generations, the current
 *     and the previous SL_HISTORY_TOPK_PERIOD_S seconds; the timer rotates
 *     them, and a read merges both across workers.
 *
 * Time is passed in (ms of the server's clock): the sampler and the
 * rotation are pure functions of their calls, so tests move time by hand.
 *
 * Threads: sampling (the timer) and reading (the HTTP workers) take the
 * history's lock; a worker's sketch has a lock of its own, uncontended but
 * for a reader's copy.  Lock order: the history's lock, then the
 * statistics' table lock (a sample reads the rules under both) or a
 * sketch's (a rotation).
 */
#ifndef SL_HISTORY_H
#define SL_HISTORY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "stats.h"

#define SL_HISTORY_SECONDS       300 /* the ring: seconds of history per rule */
#define SL_HISTORY_RULES         16  /* rules with a series */
#define SL_HISTORY_TOPK          64  /* counters of one worker's sketch (a generation) */
#define SL_HISTORY_TOPK_PERIOD_S 60  /* a generation's length */
#define SL_HISTORY_KEY_MAX                                                                         \
    200 /* bytes of a key kept; longer keys are cut                                                \
           (and counted apart by their full hash) */

enum { SL_HIST_ALLOWED, SL_HIST_DENIED, SL_HIST_SHADOW, SL_HIST_ELASTIC, SL_HIST_NCOUNTS };

/* One rule's series: counts per second, ring[s % SL_HISTORY_SECONDS] for
 * second s. */
typedef struct sl_history_series {
    const sl_rule_stats *rs; /* whose (entries live until exit); NULL: free */
    uint64_t total;          /* sum of every count in the ring */
    uint32_t n[SL_HISTORY_SECONDS][SL_HIST_NCOUNTS];
} sl_history_series;

/* A heavy-hitter counter: a key and its (over)estimated denials. */
typedef struct sl_topk_entry {
    uint64_t hash;  /* of the whole key */
    uint64_t count; /* denials counted (an overestimate by at most err) */
    uint64_t err;   /* the count it inherited when it took a slot */
    uint16_t len;   /* bytes in key[] */
    uint8_t cut;    /* the key was longer than SL_HISTORY_KEY_MAX */
    char key[SL_HISTORY_KEY_MAX];
} sl_topk_entry;

typedef struct sl_topk_gen {
    int n; /* slots used */
    sl_topk_entry e[SL_HISTORY_TOPK];
} sl_topk_gen;

/* One worker's sketch: written by its worker, read by anyone, under mu. */
typedef struct sl_topk {
    pthread_mutex_t mu;
    sl_topk_gen cur, prev;
    char pad[64];
} sl_topk;

struct sl_history_seen;

typedef struct sl_history {
    pthread_mutex_t mu;           /* guards everything below but the sketches */
    int64_t last_sec;             /* the second of the latest sample; -1: none yet */
    int64_t rotated_sec;          /* when the sketches last rotated */
    int64_t sample_sec;           /* during a sample: the second it counts into */
    struct sl_history_seen *seen; /* every rule's counts at the last sample */
    sl_history_series series[SL_HISTORY_RULES];
    int64_t first_sec;                   /* the first second sampled; -1: none */
    uint64_t all_seen[2];                /* the decisions counted at the last sample:
                                            allowed, denied */
    uint32_t all[SL_HISTORY_SECONDS][2]; /* every decision per second, ring as a
                                            series' (allowed, denied) */
    int nworkers;
    sl_topk *topk; /* nworkers sketches */
} sl_history;

/* A new history for nworkers workers, or NULL when out of memory. */
sl_history *sl_history_new(int nworkers);
void sl_history_free(sl_history *h);

/* One sample at now_ms: each rule's counts since the previous sample go
 * to the second before now's (the timer fires just after each second
 * begins), or to the latest second sampled if that is later (a timer that
 * fired early: nothing is lost).  Seconds skipped read 0.  The first
 * sample of a rule counts everything it counted since its entry was made
 * (entries start at 0: a rule's first second is the one it was bound in,
 * or the first sample after the server started).  Also rotates the sketches every
 * SL_HISTORY_TOPK_PERIOD_S.  sl_history_sample reads every rule of s
 * (sl_stats_foreach_rule); begin / observe / end do the same by hand. */
void sl_history_sample(sl_history *h, sl_stats *s, int64_t now_ms);
void sl_history_begin(sl_history *h, int64_t now_ms);
void sl_history_observe(sl_history *h, const sl_rule_stats *rs);
void sl_history_end(sl_history *h);

/* Between begin and end: the totals of every decision so far (allowed,
 * denied: cumulative, as the per-front counters hold them); what they grew
 * by since the previous call goes to the sample's second (the first call
 * counts them all).  sl_history_sample calls it with every front's sum. */
void sl_history_observe_all(sl_history *h, uint64_t allowed, uint64_t denied);

/* Counts one denial of key (len bytes, any bytes) on worker w's sketch.
 * O(SL_HISTORY_TOPK). */
void sl_history_denied(sl_history *h, int w, const char *key, size_t len);

/* A merged heavy hitter, for readers. */
typedef struct sl_history_top {
    uint64_t count, err;
    size_t len;
    int cut;
    char key[SL_HISTORY_KEY_MAX];
} sl_history_top;

/* Up to max keys with the most denials over both generations of every
 * worker, most first (ties: by key bytes); returns how many. */
int sl_history_top_keys(sl_history *h, sl_history_top *out, int max);

/* Calls fn for each tracked series, busiest first, under the history's
 * lock, with the second of the latest sample (last_sec): counts for
 * second t are sr->n[t % SL_HISTORY_SECONDS], valid for t in
 * (last_sec - SL_HISTORY_SECONDS, last_sec].  Returns last_sec (-1: no
 * sample yet, and fn is not called). */
/* Every decision per second, oldest first, under the history's lock:
 * out[i] is second last_sec - SL_HISTORY_SECONDS + 1 + i ([0] allowed,
 * [1] denied; seconds before the first sample read 0).  Sets *first_sec
 * to the first second sampled.  Returns last_sec (-1: no sample yet, out
 * all 0). */
int64_t sl_history_all(sl_history *h, uint32_t out[SL_HISTORY_SECONDS][2], int64_t *first_sec);

int64_t sl_history_foreach(sl_history *h,
                           void (*fn)(const sl_history_series *sr, int64_t last_sec, void *arg),
                           void *arg);

#endif
