/*
 * live.c -- the serving rule set, its reloads, the reload thread and the
 * watcher (live.h).
 *
 * Locks: reload_mu (one load at a time, held while loading) is taken
 * before mu (the serving set and the numbers; held for a few
 * instructions).  qmu (the reload thread's queue, the batch it is
 * answering and every inbox's answers; held for list operations and an
 * eventfd write) is never held with either: the reload thread lets go of
 * it while it loads.
 */
#include "live.h"

#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "rules.h"
#include "util.h"

typedef struct live_ask live_ask;

struct sl_live {
    char *path;
    unsigned flags; /* SL_RULES_* of every load; set before the first */
    char *dir;  /* the directory watched */
    char *base; /* path's last component when path is a file; NULL for a directory */

    pthread_mutex_t reload_mu; /* one reload at a time (held while loading) */
    pthread_mutex_t mu;        /* guards the fields below; held briefly */
    struct sl_rules *cur;
    _Atomic uint64_t gen; /* generation of cur: readers compare without mu */
    uint64_t reloads, failures;
    char last_error[SL_LIVE_ERR];
    int64_t last_error_ms;

    /* inotify; main thread only */
    int ifd;
    int wd_dir, wd_path;
    struct event *ev, *timer;
    int64_t first_event_ms; /* of the burst being debounced; 0 = none */

    void (*on_load)(void *arg, struct sl_rules *r); /* sl_live_on_load */
    void *on_load_arg;

    /* the reload thread (sl_live_start); fields guarded by qmu */
    pthread_t thread;
    pthread_mutex_t qmu;
    pthread_cond_t qcv;
    int running;                  /* the thread was started (sl_live_start) */
    int quit;                     /* sl_live_free: the thread ends */
    int kicked;                   /* a reload nobody waits the answer of is due */
    const char *whys[SL_LIVE_WHYS]; /* the distinct whys asked or kicked since the last start */
    int nwhys;
    live_ask *queue, *queue_tail; /* asked, not started */
    live_ask *batch;              /* asked before the reload in progress started */
    live_ask *editing;            /* the change being made (sl_live_change); NULL: none */
    pthread_cond_t edit_cv;       /* signalled when editing goes back to NULL */
};

/* One RL.RULES RELOAD waiting for its answer (sl_live_ask). */
struct live_ask {
    sl_live_inbox *in;
    sl_live_done done;
    void *arg;
    sl_live_edit edit; /* sl_live_change: apply is set */
    const char *why;   /* sl_live_change's */
    int rc;
    uint64_t version;
    char err[SL_LIVE_ERR];
    live_ask *next;
};

struct sl_live_inbox {
    sl_live *l;
    int efd;               /* the reload thread writes it when answers are due */
    struct event *ev;      /* on the worker's loop */
    live_ask *head, *tail; /* answered, not yet run; guarded by l->qmu */
};

sl_live *sl_live_new(const char *path)
{
    sl_live *l = calloc(1, sizeof *l);
    if (l == NULL) return NULL;
    struct stat st;
    int isdir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    /* dirname and basename may modify their argument: each gets a copy */
    char *d = strdup(path), *b = strdup(path);
    l->path = strdup(path);
    if (d && b && l->path) {
        l->dir = strdup(isdir ? path : dirname(d));
        l->base = isdir ? NULL : strdup(basename(b));
    }
    free(d);
    free(b);
    if (l->dir == NULL || (!isdir && l->base == NULL)) {
        free(l->path);
        free(l->dir);
        free(l->base);
        free(l);
        return NULL;
    }
    pthread_mutex_init(&l->reload_mu, NULL);
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->qmu, NULL);
    pthread_cond_init(&l->qcv, NULL);
    pthread_cond_init(&l->edit_cv, NULL);
    l->ifd = -1;
    l->wd_dir = l->wd_path = -1;
    return l;
}

const char *sl_live_path(const sl_live *l) { return l->path; }

/* Writes into list (cap bytes, NUL-terminated) the names of the domains of
 * a that b does not have, comma-separated; what does not fit is counted in
 * a last "+N more".  Returns how many names there were. */
static int domains_missing(const struct sl_rules *a, const struct sl_rules *b, char *list,
                           size_t cap)
{
    int n = 0, more = 0;
    size_t len = 0;
    list[0] = '\0';
    for (int i = 0; i < sl_rules_ndomains(a); i++) {
        const sl_rule_domain *d = sl_rules_domain(a, i);
        if (sl_rules_find_domain(b, d->name, d->namelen) != NULL) continue;
        n++;
        /* room for this name, its comma and a final "+N more" */
        if (more || len + d->namelen + 1 + 24 > cap) {
            more++;
            continue;
        }
        len += (size_t)snprintf(list + len, cap - len, "%s%.*s", len ? "," : "", (int)d->namelen,
                                d->name);
    }
    if (more) snprintf(list + len, cap - len, "%s+%d more", len ? "," : "", more);
    return n;
}

void sl_live_set_flags(sl_live *l, unsigned flags) { l->flags = flags; }

/* sl_live_reload with reload_mu held, also answering the version serving
 * after the attempt. */
static int do_reload_locked(sl_live *l, const char *why, uint64_t *version, char *err,
                            size_t errlen)
{
    char msg[SL_LIVE_ERR];
    int64_t t0 = sl__mono_ms();
    struct sl_rules *r = sl_rules_load_flags(l->path, l->flags, msg, sizeof msg);
    int64_t took = sl__mono_ms() - t0;
    struct sl_rules *old = NULL;
    if (l->on_load != NULL) l->on_load(l->on_load_arg, r); /* before r serves */
    uint64_t oldgen;
    int first; /* no set serves yet (the load at start): no "old rules" to keep */

    pthread_mutex_lock(&l->mu);
    oldgen = atomic_load_explicit(&l->gen, memory_order_relaxed);
    first = l->cur == NULL;
    if (r != NULL) {
        old = l->cur;
        l->cur = r;
        l->reloads++;
        l->last_error[0] = '\0';
        atomic_store_explicit(&l->gen, sl_rules_generation(r), memory_order_release);
    } else {
        l->failures++;
        snprintf(l->last_error, sizeof l->last_error, "%s", msg);
        l->last_error_ms = sl__wall_ms();
    }
    pthread_mutex_unlock(&l->mu);

    if (r == NULL) {
        /* at the first load the caller says what follows (main: sluiced
         * does not start), in its one line */
        if (!first)
            sl_log(SL_LOG_ERROR, "rules not reloaded: the old rules keep serving",
                   "why=%s path=%s version=%llu err=%s", sl_logq(why), sl_logq(l->path),
                   (unsigned long long)oldgen, sl_logq(msg));
        if (err != NULL && errlen > 0) snprintf(err, errlen, "%s", msg);
        if (version != NULL) *version = oldgen;
        return -1;
    }
    /* What changed between the sets, by domain: a domain gone from the
     * files means its requests now pass as NO_RULE, which the operator
     * must be able to see. */
    char gone[480] = "", added[480] = "", gone_f[512] = "", added_f[512] = "";
    int ngone = 0;
    if (old != NULL) {
        ngone = domains_missing(old, r, gone, sizeof gone);
        if (ngone) snprintf(gone_f, sizeof gone_f, " domains_removed=%s", sl_logq(gone));
        if (domains_missing(r, old, added, sizeof added))
            snprintf(added_f, sizeof added_f, " domains_added=%s", sl_logq(added));
    }
    /* Readers that still use the old set hold their own references. */
    sl_rules_unref(old);
    sl_log(ngone ? SL_LOG_WARN : SL_LOG_INFO, "rules loaded",
           "why=%s path=%s version=%llu domains=%d descriptors=%zu ms=%lld%s%s%s%s", sl_logq(why),
           sl_logq(l->path), (unsigned long long)sl_rules_generation(r), sl_rules_ndomains(r),
           sl_rules_count(r), (long long)took, gone_f, added_f,
           (l->flags & SL_RULES_MERGE_DOMAINS) ? " merge_domains=yes" : "",
           (l->flags & SL_RULES_COUNT_DENIED) ? " count_denied=yes" : "");
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (version != NULL) *version = sl_rules_generation(r);
    return 0;
}

static int do_reload(sl_live *l, const char *why, uint64_t *version, char *err, size_t errlen)
{
    pthread_mutex_lock(&l->reload_mu);
    int rc = do_reload_locked(l, why, version, err, errlen);
    pthread_mutex_unlock(&l->reload_mu);
    return rc;
}

int sl_live_reload(sl_live *l, const char *why, char *err, size_t errlen)
{
    return do_reload(l, why, NULL, err, errlen);
}

/* Makes the change q asks for and reloads; undoes it if the new set is
 * refused.  On the reload thread, no lock held.  Sets q->rc, q->version,
 * q->err. */
static void do_edit(sl_live *l, live_ask *q, const char *why)
{
    pthread_mutex_lock(&l->reload_mu); /* nothing reloads between the change and its load */
    pthread_mutex_lock(&l->mu);
    struct sl_rules *serving = sl_rules_ref(l->cur);
    uint64_t gen = atomic_load_explicit(&l->gen, memory_order_relaxed);
    pthread_mutex_unlock(&l->mu);
    q->err[0] = '\0';
    if (q->edit.apply(q->edit.arg, serving, l->path, q->err, sizeof q->err) != 0) {
        q->rc = -1;
        q->version = gen;
    } else {
        q->rc = do_reload_locked(l, why, &q->version, q->err, sizeof q->err);
        if (q->rc != 0) q->edit.undo(q->edit.arg);
    }
    pthread_mutex_unlock(&l->reload_mu);
    sl_rules_unref(serving);
}

/* ---- the reload thread ---------------------------------------------------- */

/* Hands an answered ask to its inbox and wakes the inbox's loop.  With
 * qmu held. */
static void deliver(live_ask *q)
{
    sl_live_inbox *in = q->in;
    q->next = NULL;
    if (in->tail)
        in->tail->next = q;
    else
        in->head = q;
    in->tail = q;
    uint64_t one = 1;
    ssize_t w = write(in->efd, &one, sizeof one);
    (void)w; /* fails only with the counter at its maximum: the loop is awake anyway */
}

/* Notes why (a string that outlives the reload: a literal) among the
 * reasons of the next reload, once each, the first SL_LIVE_WHYS of them.
 * Under qmu. */
static void whys_add(sl_live *l, const char *why)
{
    for (int i = 0; i < l->nwhys; i++)
        if (strcmp(l->whys[i], why) == 0) return;
    if (l->nwhys < SL_LIVE_WHYS) l->whys[l->nwhys++] = why;
}

/* The reasons of the reload starting, joined with '+' in the order they
 * came ("SIGHUP+inotify"), into b: every request a reload shares is named
 * in its log line, not only the first.  None (cannot happen: a reload
 * starts because one was asked): "RL.RULES RELOAD".  Under qmu. */
static void whys_join(const sl_live *l, char *b, size_t cap)
{
    size_t n = 0;
    b[0] = '\0';
    for (int i = 0; i < l->nwhys && n < cap; i++) {
        int w = snprintf(b + n, cap - n, "%s%s", i ? "+" : "", l->whys[i]);
        if (w < 0) break;
        n += (size_t)w;
    }
    if (l->nwhys == 0) snprintf(b, cap, "RL.RULES RELOAD");
}

static void *reload_main(void *arg)
{
    sl_live *l = arg;
    char msg[SL_LIVE_ERR];
    pthread_mutex_lock(&l->qmu);
    for (;;) {
        while (!l->quit && l->queue == NULL && !l->kicked) pthread_cond_wait(&l->qcv, &l->qmu);
        if (l->quit) break;
        if (l->queue != NULL && l->queue->edit.apply != NULL) {
            /* a change is made and answered on its own, in the order asked */
            live_ask *q = l->queue;
            l->queue = q->next;
            if (l->queue == NULL) l->queue_tail = NULL;
            l->editing = q;
            pthread_mutex_unlock(&l->qmu);
            do_edit(l, q, q->why);
            pthread_mutex_lock(&l->qmu);
            l->editing = NULL;
            pthread_cond_broadcast(&l->edit_cv);
            deliver(q);
            continue;
        }
        /* everything asked so far shares this reload; what is asked from
         * now on waits for the next, which will see the files after it */
        char why[SL_LIVE_WHYS * 32];
        whys_join(l, why, sizeof why);
        l->batch = l->queue;
        l->queue = l->queue_tail = NULL;
        l->kicked = 0;
        l->nwhys = 0;
        pthread_mutex_unlock(&l->qmu);

        uint64_t version = 0;
        int rc = do_reload(l, why, &version, msg, sizeof msg);

        pthread_mutex_lock(&l->qmu);
        while (l->batch != NULL) { /* inboxes freed meanwhile took theirs out */
            live_ask *q = l->batch;
            l->batch = q->next;
            q->rc = rc;
            q->version = version;
            snprintf(q->err, sizeof q->err, "%s", rc == 0 ? "" : msg);
            deliver(q);
        }
    }
    pthread_mutex_unlock(&l->qmu);
    return NULL;
}

int sl_live_start(sl_live *l, char *err, size_t errlen)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread inherits it */
    int rc = pthread_create(&l->thread, NULL, reload_main, l);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the rules reload thread: %s", strerror(rc));
        return -1;
    }
    pthread_mutex_lock(&l->qmu);
    l->running = 1;
    pthread_mutex_unlock(&l->qmu);
    return 0;
}

void sl_live_kick(sl_live *l, const char *why)
{
    pthread_mutex_lock(&l->qmu);
    if (!l->running || l->quit) {
        pthread_mutex_unlock(&l->qmu);
        sl_live_reload(l, why, NULL, 0);
        return;
    }
    l->kicked = 1;
    whys_add(l, why);
    pthread_cond_signal(&l->qcv);
    pthread_mutex_unlock(&l->qmu);
}

/* Queues an ask (an edit when edit is not NULL). */
static int enqueue(sl_live_inbox *in, const char *why, const sl_live_edit *edit, sl_live_done done,
                   void *arg)
{
    sl_live *l = in->l;
    live_ask *q = calloc(1, sizeof *q);
    if (q == NULL) return -1;
    q->in = in;
    q->done = done;
    q->arg = arg;
    q->why = why;
    if (edit != NULL) q->edit = *edit;
    pthread_mutex_lock(&l->qmu);
    if (!l->running || l->quit) {
        pthread_mutex_unlock(&l->qmu);
        free(q);
        return -1;
    }
    if (l->queue_tail)
        l->queue_tail->next = q;
    else
        l->queue = q;
    l->queue_tail = q;
    if (edit == NULL) whys_add(l, why);
    pthread_cond_signal(&l->qcv);
    pthread_mutex_unlock(&l->qmu);
    return 0;
}

int sl_live_ask(sl_live_inbox *in, const char *why, sl_live_done done, void *arg)
{
    return enqueue(in, why, NULL, done, arg);
}

int sl_live_change(sl_live_inbox *in, const char *why, const sl_live_edit *edit, sl_live_done done,
                   void *arg)
{
    if (edit == NULL || edit->apply == NULL || edit->undo == NULL) return -1;
    return enqueue(in, why, edit, done, arg);
}

/* Runs the answers of in that are due (the eventfd woke its loop). */
static void on_answers(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    sl_live_inbox *in = arg;
    uint64_t n;
    ssize_t r = read(fd, &n, sizeof n);
    (void)r; /* EAGAIN: this wake-up's answers were run by an earlier one */
    pthread_mutex_lock(&in->l->qmu);
    live_ask *q = in->head;
    in->head = in->tail = NULL;
    pthread_mutex_unlock(&in->l->qmu);
    while (q != NULL) {
        live_ask *next = q->next;
        q->done(q->arg, q->rc, q->version, q->err);
        free(q);
        q = next;
    }
}

sl_live_inbox *sl_live_inbox_new(sl_live *l, struct event_base *loop, char *err, size_t errlen)
{
    sl_live_inbox *in = calloc(1, sizeof *in);
    if (in == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    in->l = l;
    in->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (in->efd < 0) {
        snprintf(err, errlen, "eventfd: %s", strerror(errno));
        free(in);
        return NULL;
    }
    in->ev = event_new(loop, in->efd, EV_READ | EV_PERSIST, on_answers, in);
    if (in->ev == NULL || event_add(in->ev, NULL) != 0) {
        snprintf(err, errlen, "out of memory");
        if (in->ev) event_free(in->ev);
        close(in->efd);
        free(in);
        return NULL;
    }
    return in;
}

/* Moves the asks of `in` from *list (tail *tail, or NULL) to the end of
 * *out.  With qmu held. */
static void take_asks(live_ask **list, live_ask **tail, sl_live_inbox *in, live_ask ***out)
{
    live_ask **pp = list, *last = NULL;
    while (*pp != NULL) {
        live_ask *q = *pp;
        if (q->in != in) {
            last = q;
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        q->next = NULL;
        **out = q;
        *out = &q->next;
    }
    if (tail != NULL) *tail = last;
}

void sl_live_inbox_free(sl_live_inbox *in)
{
    if (in == NULL) return;
    sl_live *l = in->l;
    live_ask *answered, *unanswered = NULL, **end = &unanswered;
    pthread_mutex_lock(&l->qmu);
    /* a change of in's being made uses its arg: wait for its answer */
    while (l->editing != NULL && l->editing->in == in) pthread_cond_wait(&l->edit_cv, &l->qmu);
    answered = in->head;
    in->head = in->tail = NULL;
    take_asks(&l->queue, &l->queue_tail, in, &end);
    take_asks(&l->batch, NULL, in, &end);
    pthread_mutex_unlock(&l->qmu);
    /* nothing of l points to in or its asks any more */
    while (answered != NULL) {
        live_ask *next = answered->next;
        answered->done(answered->arg, answered->rc, answered->version, answered->err);
        free(answered);
        answered = next;
    }
    while (unanswered != NULL) {
        live_ask *next = unanswered->next;
        unanswered->done(unanswered->arg, -1, 0, "the server is stopping");
        free(unanswered);
        unanswered = next;
    }
    event_free(in->ev);
    close(in->efd);
    free(in);
}

void sl_live_on_load(sl_live *l, void (*fn)(void *arg, struct sl_rules *r), void *arg)
{
    pthread_mutex_lock(&l->reload_mu);
    l->on_load = fn;
    l->on_load_arg = arg;
    pthread_mutex_unlock(&l->reload_mu);
}

struct sl_rules *sl_live_get(sl_live *l, sl_live_cache *c)
{
    uint64_t g = atomic_load_explicit(&l->gen, memory_order_acquire);
    if (g == c->gen && c->rules != NULL) return c->rules;
    pthread_mutex_lock(&l->mu);
    struct sl_rules *r = sl_rules_ref(l->cur);
    g = atomic_load_explicit(&l->gen, memory_order_relaxed);
    pthread_mutex_unlock(&l->mu);
    sl_rules_unref(c->rules);
    c->rules = r;
    c->gen = g;
    return r;
}

void sl_live_cache_drop(sl_live_cache *c)
{
    sl_rules_unref(c->rules);
    c->rules = NULL;
    c->gen = 0;
}

void sl_live_info_get(sl_live *l, sl_live_info *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&l->mu);
    if (l->cur != NULL) {
        out->version = sl_rules_generation(l->cur);
        out->loaded_at_ms = sl_rules_loaded_at_ms(l->cur);
        out->ndomains = sl_rules_ndomains(l->cur);
        out->ndescriptors = sl_rules_count(l->cur);
    }
    out->reloads = l->reloads;
    out->failures = l->failures;
    snprintf(out->last_error, sizeof out->last_error, "%s", l->last_error);
    out->last_error_ms = l->last_error_ms;
    out->watching = l->ifd >= 0;
    pthread_mutex_unlock(&l->mu);
}

/* ---- inotify -------------------------------------------------------------- */

#define DIR_EVENTS                                                                            \
    (IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_CLOSE_WRITE | IN_ATTRIB |       \
     IN_DELETE_SELF | IN_MOVE_SELF)
#define PATH_EVENTS (IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_MODIFY)

/* (Re-)adds the watches: the directory, and the path itself (through a
 * symbolic link, its target) -- either may be a new inode after a swap. */
static void add_watches(sl_live *l)
{
    int wd = inotify_add_watch(l->ifd, l->dir, DIR_EVENTS);
    if (wd >= 0 && wd != l->wd_dir) {
        if (l->wd_dir >= 0 && l->wd_dir != l->wd_path) inotify_rm_watch(l->ifd, l->wd_dir);
        l->wd_dir = wd;
    }
    if (l->base != NULL) {
        wd = inotify_add_watch(l->ifd, l->path, PATH_EVENTS);
        if (wd >= 0 && wd != l->wd_path) {
            if (l->wd_path >= 0 && l->wd_path != l->wd_dir) inotify_rm_watch(l->ifd, l->wd_path);
            l->wd_path = wd;
        }
    }
}

/* Does an event in the watched directory concern the rules? */
static int relevant(const sl_live *l, const struct inotify_event *e)
{
    if (e->wd != l->wd_dir) return 1; /* the path's own watch */
    if (e->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_Q_OVERFLOW)) return 1;
    if (e->len == 0) return 1;
    const char *name = e->name;
    if (strncmp(name, "..", 2) == 0) return 1; /* Kubernetes' ..data swap */
    if (l->base != NULL) return strcmp(name, l->base) == 0;
    size_t n = strlen(name);
    if (name[0] == '.') return 0;
    return (n > 5 && strcmp(name + n - 5, ".yaml") == 0) ||
           (n > 4 && strcmp(name + n - 4, ".yml") == 0);
}

static void on_debounced(evutil_socket_t fd, short what, void *arg)
{
    (void)fd, (void)what;
    sl_live *l = arg;
    l->first_event_ms = 0;
    sl_live_kick(l, "inotify");
    add_watches(l);
}

static void on_inotify(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    sl_live *l = arg;
    char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    int hit = 0;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break; /* EAGAIN: drained */
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            if (e->mask & IN_IGNORED) {
                if (e->wd == l->wd_dir) l->wd_dir = -1;
                if (e->wd == l->wd_path) l->wd_path = -1;
                hit = 1;
            } else if (relevant(l, e)) {
                hit = 1;
            }
            p += sizeof *e + e->len;
        }
    }
    if (!hit) return;
    int64_t now = sl__mono_ms();
    if (l->first_event_ms == 0) l->first_event_ms = now;
    int64_t wait = SL_LIVE_DEBOUNCE_MS;
    int64_t left = l->first_event_ms + SL_LIVE_DEBOUNCE_MAX_MS - now;
    if (left < wait) wait = left > 0 ? left : 0;
    struct timeval tv = {(time_t)(wait / 1000), (suseconds_t)(wait % 1000) * 1000};
    evtimer_add(l->timer, &tv); /* re-adding restarts the wait */
}

int sl_live_watch(sl_live *l, struct event_base *base, char *err, size_t errlen)
{
    l->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (l->ifd < 0) {
        snprintf(err, errlen, "inotify_init1: %s", strerror(errno));
        return -1;
    }
    add_watches(l);
    if (l->wd_dir < 0) {
        snprintf(err, errlen, "cannot watch %s: %s", l->dir, strerror(errno));
        close(l->ifd);
        l->ifd = -1;
        return -1;
    }
    l->ev = event_new(base, l->ifd, EV_READ | EV_PERSIST, on_inotify, l);
    l->timer = evtimer_new(base, on_debounced, l);
    if (l->ev == NULL || l->timer == NULL || event_add(l->ev, NULL) != 0) {
        snprintf(err, errlen, "cannot watch the rules: out of memory");
        return -1;
    }
    return 0;
}

void sl_live_free(sl_live *l)
{
    if (l == NULL) return;
    pthread_mutex_lock(&l->qmu);
    int running = l->running;
    l->quit = 1;
    pthread_cond_signal(&l->qcv);
    pthread_mutex_unlock(&l->qmu);
    if (running) pthread_join(l->thread, NULL); /* after the reload it may be running */
    if (l->ev) event_free(l->ev);
    if (l->timer) event_free(l->timer);
    if (l->ifd >= 0) close(l->ifd);
    sl_rules_unref(l->cur);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->reload_mu);
    pthread_mutex_destroy(&l->qmu);
    pthread_cond_destroy(&l->qcv);
    pthread_cond_destroy(&l->edit_cv);
    free(l->path);
    free(l->dir);
    free(l->base);
    free(l);
}
