/*
 * live.h -- the rules sluiced serves, and how they change while it runs.
 *
 * One sl_live holds the current rule set (src/rules/rules.h) of the server.
 * A reload -- at start, on SIGHUP, when the files change (inotify), or on
 * `RL.RULES RELOAD` -- loads and validates the whole new set first; only a
 * good set replaces the current one, in one pointer swap under a mutex.
 * A bad set changes nothing: the old one keeps serving and the error
 * ("FILE:LINE:COLUMN: what is wrong") is kept for INFO and RL.RULES.
 *
 * Readers never wait on a reload.  A worker keeps its own reference to the
 * set it last used, with the set's generation, in an sl_live_cache; each
 * command compares that with the live generation (one relaxed atomic
 * load) and only when it changed takes the mutex for the few instructions
 * of taking a reference to the new set.  A decision in flight finishes on
 * the set it started with; the old set is freed when its last reader lets
 * go of it.  So every decision uses exactly one set, old or new.
 *
 * Watching (sl_live_watch): inotify on the rules path's directory (the
 * path itself when it is a directory, else its parent) and on the path
 * itself.  Kubernetes updates a ConfigMap volume by writing a new hidden
 * "..TIMESTAMP" directory and renaming a "..data_tmp" symlink over
 * "..data"; the visible "api.yaml" links point through "..data".  The
 * rename is an IN_MOVED_TO "..data" in the watched directory, so the swap
 * is seen; the loader skips hidden names, so the new files are loaded once,
 * through the visible links.  Events are debounced (SL_LIVE_DEBOUNCE_MS of
 * quiet, at most SL_LIVE_DEBOUNCE_MAX_MS after the first) so an editor's or
 * kubelet's burst of events is one reload; a reload that reads a file still
 * being written fails, keeps the old set, and the file's close-after-write
 * event brings the next reload.
 */
#ifndef SL_LIVE_H
#define SL_LIVE_H

#include <stddef.h>
#include <stdint.h>

struct sl_rules;
struct event_base;

#define SL_LIVE_DEBOUNCE_MS     200
#define SL_LIVE_DEBOUNCE_MAX_MS 2000
#define SL_LIVE_ERR             1024

typedef struct sl_live sl_live;

/* What INFO and RL.RULES show; a copy taken under the mutex. */
typedef struct sl_live_info {
    uint64_t version;          /* generation of the serving set; 0 = none */
    int64_t loaded_at_ms;      /* wall clock when it loaded */
    int ndomains;
    size_t ndescriptors;
    uint64_t reloads;          /* successful loads, the first one included */
    uint64_t failures;         /* loads refused */
    char last_error[SL_LIVE_ERR]; /* "" when the last attempt succeeded */
    int64_t last_error_ms;     /* when the last refused load happened; 0 = never */
    int watching;              /* inotify active */
} sl_live_info;

/* A worker's reference to the set it uses.  Zero-initialise; give back with
 * sl_live_cache_drop when the thread is done. */
typedef struct sl_live_cache {
    struct sl_rules *rules;
    uint64_t gen;
} sl_live_cache;

/* A holder for the rules at path (a file or a directory), with no set yet.
 * NULL when out of memory. */
sl_live *sl_live_new(const char *path);

/* Loads path and, if the whole set is good, makes it the serving set.
 * `why` ("start", "SIGHUP", "inotify", "RL.RULES RELOAD") goes to the log.
 * Returns 0, or -1 with the loader's message in err: the serving set is
 * then unchanged.  Thread-safe: concurrent reloads run one after another. */
int sl_live_reload(sl_live *l, const char *why, char *err, size_t errlen);

/* Calls fn(arg, set) after every load attempt, before a good set starts
 * serving (set = NULL: the load failed), with the reload lock held: the
 * server binds its statistics to the new set there and counts reloads.
 * fn must not reload. */
void sl_live_on_load(sl_live *l, void (*fn)(void *arg, struct sl_rules *r), void *arg);

/* The serving set for a reader using cache c (one cache per thread): a
 * borrowed pointer, valid until the next call with the same cache or
 * sl_live_cache_drop.  NULL when no set has loaded. */
struct sl_rules *sl_live_get(sl_live *l, sl_live_cache *c);

/* Releases the reference held by c. */
void sl_live_cache_drop(sl_live_cache *c);

void sl_live_info_get(sl_live *l, sl_live_info *out);

/* The rules path. */
const char *sl_live_path(const sl_live *l);

/* Starts watching the rules with inotify on base (the main thread's
 * loop): changes trigger sl_live_reload("inotify") from that loop.
 * Returns 0, or -1 with a message in err (the server then runs without
 * watching; SIGHUP and RL.RULES RELOAD still work). */
int sl_live_watch(sl_live *l, struct event_base *base, char *err, size_t errlen);

/* Stops watching and frees l and its set (readers must be done). */
void sl_live_free(sl_live *l);

#endif
