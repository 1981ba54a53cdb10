/*
 * live.c -- the serving rule set, its reloads and its watcher (live.h).
 */
#include "live.h"

#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "rules.h"
#include "util.h"

struct sl_live {
    char *path;
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
    l->ifd = -1;
    l->wd_dir = l->wd_path = -1;
    return l;
}

const char *sl_live_path(const sl_live *l) { return l->path; }

int sl_live_reload(sl_live *l, const char *why, char *err, size_t errlen)
{
    char msg[SL_LIVE_ERR];
    pthread_mutex_lock(&l->reload_mu);
    int64_t t0 = sl__mono_ms();
    struct sl_rules *r = sl_rules_load(l->path, msg, sizeof msg);
    int64_t took = sl__mono_ms() - t0;
    struct sl_rules *old = NULL;
    if (l->on_load != NULL) l->on_load(l->on_load_arg, r); /* before r serves */
    uint64_t oldgen;

    pthread_mutex_lock(&l->mu);
    oldgen = atomic_load_explicit(&l->gen, memory_order_relaxed);
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
    pthread_mutex_unlock(&l->reload_mu);

    if (r == NULL) {
        sl_log(SL_LOG_ERROR, "rules not reloaded: the old rules keep serving",
               "why=%s path=%s version=%llu err=%s", why, sl_logq(l->path),
               (unsigned long long)oldgen, sl_logq(msg));
        if (err != NULL && errlen > 0) snprintf(err, errlen, "%s", msg);
        return -1;
    }
    /* Readers that still use the old set hold their own references. */
    sl_rules_unref(old);
    sl_log(SL_LOG_INFO, "rules loaded", "why=%s path=%s version=%llu domains=%d descriptors=%zu ms=%lld",
           why, sl_logq(l->path), (unsigned long long)sl_rules_generation(r),
           sl_rules_ndomains(r), sl_rules_count(r), (long long)took);
    if (err != NULL && errlen > 0) err[0] = '\0';
    return 0;
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
    sl_live_reload(l, "inotify", NULL, 0);
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
    if (l->ev) event_free(l->ev);
    if (l->timer) event_free(l->timer);
    if (l->ifd >= 0) close(l->ifd);
    sl_rules_unref(l->cur);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->reload_mu);
    free(l->path);
    free(l->dir);
    free(l->base);
    free(l);
}
