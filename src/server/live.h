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
 * Where reloads run.  Once sl_live_start has run, every reload after the
 * first one -- SIGHUP and inotify (sl_live_kick), RL.RULES RELOAD
 * (sl_live_ask) -- runs on the set's own reload thread, never on a worker's
 * event loop nor on the main thread, so a slow or broken rules file can
 * neither stall a worker's clients nor delay SIGTERM.  A reload asked for
 * while another runs waits for the next one (it must see the files as they
 * are after it asked), and everything asked meanwhile shares that next
 * reload: concurrent asks coalesce.  A worker gets its answer through its
 * inbox (sl_live_inbox): the reload thread queues the answer and wakes the
 * worker's event loop with an eventfd, and the answer's callback runs on
 * the worker's thread, as a backend's late completion does.
 *
 * A successful reload logs "rules loaded" with every domain that is gone
 * (domains_removed=..., at level warn: its requests now pass as NO_RULE) and
 * every new one (domains_added=...).
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
 * event brings the next reload.  (Kubernetes also removes the visible link
 * of a key deleted from the ConfigMap only after the swap: a reload in
 * between fails on the dangling link and the removal brings the next one.)
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
/* the distinct reasons one reload's log line names ("SIGHUP+inotify"):
 * reloads asked while one runs share the next */
#define SL_LIVE_WHYS 4

typedef struct sl_live sl_live;
typedef struct sl_live_inbox sl_live_inbox;

/* The answer to sl_live_ask: rc 0 and the new version, or rc -1 with the
 * loader's message in err and the version that keeps serving (0 = none);
 * err lives only during the call. */
typedef void (*sl_live_done)(void *arg, int rc, uint64_t version, const char *err);

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

/* The SL_RULES_* loading options (rules.h) of every later load, the first
 * included: set before it.  Default 0. */
void sl_live_set_flags(sl_live *l, unsigned flags);

/* Loads path and, if the whole set is good, makes it the serving set.
 * `why` ("start", "SIGHUP", "inotify", "RL.RULES RELOAD") goes to the log;
 * sl_live_kick and sl_live_ask keep the pointer: pass a string literal.
 * Returns 0, or -1 with the loader's message in err: the serving set is
 * then unchanged (a refused reload is logged; a refused first load, with
 * nothing serving, is left to the caller to report).  Thread-safe:
 * concurrent reloads run one after another. */
int sl_live_reload(sl_live *l, const char *why, char *err, size_t errlen);

/* Starts the reload thread (all signals blocked in it).  Call once, after
 * the first load; from then on sl_live_kick and sl_live_ask reload there.
 * Returns 0, or -1 with a message in err. */
int sl_live_start(sl_live *l, char *err, size_t errlen);

/* Asks for a reload without waiting for it (SIGHUP, inotify): on the
 * reload thread, coalesced with whatever else is pending.  Without a
 * reload thread (sl_live_start not called: tests, tools) it reloads now,
 * on the caller's thread. */
void sl_live_kick(sl_live *l, const char *why);

/* A worker's inbox for the answers of the reloads it asks for: an eventfd
 * watched on loop, the worker's event_base, which runs the answers'
 * callbacks.  NULL with a message in err.  Use it from loop's thread. */
sl_live_inbox *sl_live_inbox_new(sl_live *l, struct event_base *loop, char *err, size_t errlen);

/* Asks the reload thread for a reload whose answer done(arg, ...) runs
 * later on the inbox's loop, exactly once -- never before this returns.
 * Returns 0, or -1 (out of memory, or no reload thread running) and then
 * done is never called. */
int sl_live_ask(sl_live_inbox *in, const char *why, sl_live_done done, void *arg);

/* A change to the rules files that a reload must accept (sl_live_change). */
typedef struct sl_live_edit {
    /* Changes the files under path; serving is the set serving now (NULL:
     * none), for finding a domain's file.  Returns 0, or -1 with a message
     * in err having changed nothing (no reload follows). */
    int (*apply)(void *arg, const struct sl_rules *serving, const char *path, char *err,
                 size_t errlen);
    /* Puts the files back as apply found them: the set they made was refused. */
    void (*undo)(void *arg);
    void *arg;
} sl_live_edit;

/* Asks the reload thread to make a change and reload, as one step no other
 * reload runs inside: apply, then a reload; if that reload is refused,
 * undo (the serving set never changed).  done(arg, ...) then runs on the
 * inbox's loop as for sl_live_ask: rc 0 and the new version, or rc -1 and
 * apply's or the loader's message.  Changes run one at a time, in the
 * order asked, each with its own reload (never coalesced).  edit is
 * copied; edit->arg must live until done runs (sl_live_inbox_free waits
 * for a change in progress).  Returns 0, or -1 as sl_live_ask. */
int sl_live_change(sl_live_inbox *in, const char *why, const sl_live_edit *edit, sl_live_done done,
                   void *arg);

/* Frees an inbox, from its loop's thread or once that loop has stopped for
 * good (net.c frees a worker's after joining it).  Answers still due run
 * their callbacks here and now: those already known with their answer, those
 * not yet answered with rc -1 "the server is stopping" (the reload thread
 * then never touches them).  Free every inbox before sl_live_free. */
void sl_live_inbox_free(sl_live_inbox *in);

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
 * loop): changes trigger sl_live_kick("inotify") from that loop.
 * Returns 0, or -1 with a message in err (the server then runs without
 * watching; SIGHUP and RL.RULES RELOAD still work). */
int sl_live_watch(sl_live *l, struct event_base *base, char *err, size_t errlen);

/* Stops watching, stops the reload thread (after the reload it may be
 * running) and frees l and its set (readers and inboxes must be done). */
void sl_live_free(sl_live *l);

#endif
