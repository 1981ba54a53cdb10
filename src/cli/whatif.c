/*
 * whatif.c -- `sluicectl replay --rules PATH --domain D`: what-if replay of a
 * rules file (docs/replay.md).  Each request of the trace is decided by
 * sl_rules_check, the very function behind sluiced's RL.CHECK, on one store,
 * in input order, so the answers are the server's for the same requests sent
 * one after the other (with AT t).
 *
 * One thread: a request's descriptors may share counters with any other
 * request, so decisions cannot be dealt out by key as `sluicectl replay` does.
 * The loop reads 1 MiB blocks, finds lines with memchr, parses each into one
 * reused request (whatif_parse.c), decides it, and formats the answer by
 * hand into a buffer written 64 KiB at a time; nothing is allocated per line
 * (the summary's tables grow by doubling, or not at all for the top keys).
 *
 * On a malformed line everything before it has been answered (stdout is
 * flushed first), then `sluicectl: line N: <what is wrong>` goes to stderr and
 * the exit status is 2.
 */
#include "whatif.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend_local.h"
#include "check.h"
#include "rules.h"
#include "run.h"
#include "sluice.h"
#include "text.h"
#include "util.h"
#include "whatif_parse.h"

#define IN_BLOCK      (1u << 20)  /* bytes asked of each read(2) */
#define SHOW_MAX      120         /* bytes of a name or key shown in the summary */
#define TOP_KEYS      10          /* keys listed by --summary */
#define TOP_TRACK     4096        /* keys the summary tracks (Space-Saving) */
#define PROGRESS_MIN  (16u << 20) /* a progress bar for regular files this large */
#define PROGRESS_TICK 100000000   /* ns between redraws, at least */
#define PROGRESS_BAR  30          /* characters of the bar */

/* ---- progress bar ------------------------------------------------------- */

typedef struct progress {
    int on;         /* stderr is a terminal and the input a large regular file */
    uint64_t total; /* the file's size, bytes */
    int64_t t0;     /* when the run started, monotonic ns */
    int64_t last;   /* when the bar was last drawn, monotonic ns */
    int shown;      /* the bar is on the screen */
    int out_tty;    /* standard output is a terminal too: erase the bar before answers */
} progress;

static void write_err(const char *s, size_t n)
{
    (void)sl__write_all(2, s, n); /* a progress bar that cannot be drawn is no error */
}

/* Draws the bar if it was never drawn or PROGRESS_TICK has passed since the
 * last time.  done: bytes of input consumed; lines: lines read. */
static void progress_tick(progress *pg, uint64_t done, uint64_t lines)
{
    if (!pg->on) return;
    int64_t t = sl__mono_ns();
    if (pg->last > 0 && t - pg->last < PROGRESS_TICK) return;
    pg->last = t;
    pg->shown = 1;
    double frac = pg->total ? (double)done / (double)pg->total : 1.0;
    if (frac > 1) frac = 1;
    int fill = (int)(frac * PROGRESS_BAR);
    char bar[PROGRESS_BAR + 1];
    memset(bar, '#', (size_t)fill);
    memset(bar + fill, '.', (size_t)(PROGRESS_BAR - fill));
    bar[PROGRESS_BAR] = '\0';
    double secs = (double)(t - pg->t0) / 1e9;
    char line[160];
    int n = snprintf(line, sizeof line,
                     "\rsluicectl replay: [%s] %5.1f%% of %.1f MiB, %.2f M lines/s\033[K", bar,
                     frac * 100, (double)pg->total / (1 << 20),
                     secs > 0 ? (double)lines / secs / 1e6 : 0.0);
    if (n > 0) write_err(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* Erases the bar, before anything else goes to stderr and at the end. */
static void progress_clear(progress *pg)
{
    if (!pg->shown) return;
    write_err("\r\033[K", 4);
    pg->shown = 0;
}

/* sl__out's hook before each write: when the answers go to the bar's
 * terminal, the bar is erased first (and redrawn at the next tick). */
static void progress_before_write(void *ctx)
{
    progress *pg = ctx;
    if (pg->out_tty) progress_clear(pg);
}

/* ---- output ------------------------------------------------------------- */

/* Bytes a rule name cannot hold as they are in an answer line: blanks and
 * control bytes (they would split the line's fields) and '%' (the escape). */
static inline int name_escaped(unsigned char c) { return c <= 0x20 || c == 0x7f || c == '%'; }

/* Appends a rule name, bytes name_escaped() as %XX; "-" for none (NULL), and
 * a name that is exactly "-" as %2D, so "-" always means no rule. */
static void put_name(sl__out *o, const char *name)
{
    static const char hex[] = "0123456789ABCDEF";
    if (name == NULL || (name[0] == '-' && name[1] == '\0')) {
        const char *w = name == NULL ? "-" : "%2D";
        size_t n = strlen(w);
        memcpy(sl__out_reserve(o, n), w, n);
        o->len += n;
        return;
    }
    for (const unsigned char *s = (const unsigned char *)name; *s;) {
        char *p = sl__out_reserve(o, 3 * 256), *p0 = p;
        for (int i = 0; i < 256 && *s; i++, s++) {
            if (name_escaped(*s)) {
                *p++ = '%';
                *p++ = hex[*s >> 4];
                *p++ = hex[*s & 15];
            } else {
                *p++ = (char)*s;
            }
        }
        o->len += (size_t)(p - p0);
    }
}

/* One answer line: the six fields, then " CODE:NAME" per descriptor. */
static void put_answer(sl__out *o, const sl_result *r, const sl_check_status *st, int n)
{
    char *p = sl__out_reserve(o, SL__RESULT_MAX + 1), *p0 = p;
    p = sl__put_result(p, r);
    o->len += (size_t)(p - p0);
    for (int i = 0; i < n; i++) {
        const char *code = sl_check_code_name(st[i].code);
        size_t cl = strlen(code);
        p = sl__out_reserve(o, cl + 2);
        *p++ = ' ';
        memcpy(p, code, cl);
        p[cl] = ':';
        o->len += cl + 2;
        put_name(o, st[i].name);
    }
    *sl__out_reserve(o, 1) = '\n';
    o->len++;
}

/* ---- input -------------------------------------------------------------- */

typedef struct reader {
    int fd;
    const char *name;
    char *buf; /* IN_BLOCK + SL_WHATIF_MAX_LINE + 1 bytes */
    size_t pos, end;
    int eof, short_read; /* the last read(2) returned less than asked */
    uint64_t base;       /* bytes of input before buf[0] */
    uint64_t lineno;
} reader;

#define READ_CAP (IN_BLOCK + SL_WHATIF_MAX_LINE + 1)

/* The next line, without its '\n'.  Returns 1 with *line and *len (a len
 * above SL_WHATIF_MAX_LINE is a line too long, which the parser refuses),
 * 0 at the end of the input, -1 on a read error (errno set).  Before a read
 * that may wait (after a short one), the answers so far are written, so a
 * live stream (tail -f) gets its answers as it goes. */
static int next_line(reader *rd, sl__out *out, progress *pg, const char **line, size_t *len)
{
    for (;;) {
        char *s = rd->buf + rd->pos;
        size_t avail = rd->end - rd->pos;
        char *nl = memchr(s, '\n', avail);
        if (nl != NULL) {
            *line = s;
            *len = (size_t)(nl - s);
            rd->pos += *len + 1;
            return 1;
        }
        if (rd->eof || avail > SL_WHATIF_MAX_LINE) {
            if (avail == 0) return 0;
            *line = s; /* the last line, without '\n'; or one too long */
            *len = avail;
            rd->pos = rd->end;
            return 1;
        }
        memmove(rd->buf, s, avail);
        rd->base += rd->pos;
        rd->pos = 0;
        rd->end = avail;
        progress_tick(pg, rd->base, rd->lineno);
        if (rd->short_read) sl__out_flush(out);
        size_t want = READ_CAP - avail;
        ssize_t n = sl__read(rd->fd, rd->buf + avail, want);
        if (n < 0) return -1;
        rd->eof = n == 0;
        rd->short_read = (size_t)n < want;
        rd->end += (size_t)n;
    }
}

/* ---- summary ------------------------------------------------------------ */

/* Counts for one limit of the domain.  A descriptor counts for the limit its
 * status names (sl_check_status.rule). */
typedef struct rule_stat {
    const sl_rule_limit *rl;
    uint64_t matched;   /* descriptors whose status names this limit */
    uint64_t allowed;   /* ... not OVER_LIMIT, in an allowed request */
    uint64_t denied;    /* ... OVER_LIMIT */
    uint64_t elsewhere; /* ... not OVER_LIMIT, but another descriptor denied the request */
    uint64_t shadow;    /* ... SHADOW: over, but the rule is in shadow mode (allowed) */
    uint64_t elastic;   /* ... ELASTIC: over L, allowed on the spare pool */
} rule_stat;

/*
 * The most denied counting keys, in bounded memory: the Space-Saving
 * algorithm (Metwally, Agrawal, El Abbadi, 2005).  Up to TOP_TRACK keys are
 * counted exactly; when the table is full, a new key takes the place of the
 * key with the fewest denials, m, and starts at m + 1 with err = m: it may
 * have had up to m denials before it was tracked.  Any key denied more than
 * (all denials / TOP_TRACK) times is in the table.  A min-heap on count finds
 * the key to replace in O(1) and is kept in O(log TOP_TRACK) per denial; an
 * open-addressing index (linear probing, backward-shift deletion) finds a
 * key's entry.
 */
typedef struct top_key {
    uint64_t count;  /* denials counted + err: an upper bound of its denials */
    uint64_t err;    /* at most this many denials before it was tracked */
    uint64_t over;   /* OVER_LIMIT answers counted while tracked */
    uint64_t shadow; /* SHADOW answers counted while tracked */
    uint64_t hash;
    uint32_t heap_at; /* its place in heap[] */
    uint32_t klen;
    char key[SL_MAX_KEY];
} top_key;

#define TOP_SLOTS (2 * TOP_TRACK) /* index size, a power of two */

typedef struct summary {
    rule_stat *rules; /* every limit of the domain, in file order */
    size_t nrules;
    const sl_rule_limit **rkey; /* index: limit -> rules[] (open addressing) */
    uint32_t *rval;
    size_t rcap; /* power of two */
    uint64_t requests, allowed, descriptors;
    uint64_t by_code[SL_CHECK_OVER_QUOTA + 1]; /* descriptors by their answer */
    top_key *keys; /* TOP_TRACK, allocated at the first denial */
    uint32_t nkeys;
    uint32_t heap[TOP_TRACK];
    int32_t slot[TOP_SLOTS]; /* index into keys, -1 = empty */
    uint64_t replaced;       /* keys that took another's place */
} summary;

static inline size_t ptr_hash(const void *p, size_t cap)
{
    return (size_t)(((uintptr_t)p * 0x9e3779b97f4a7c15ULL) >> 17) & (cap - 1);
}

typedef struct collect {
    summary *s;
    const sl_rule_domain *dom;
    size_t cap; /* of s->rules */
    int failed;
} collect;

/* sl_rules_foreach's callback: appends the limits of dom's nodes to
 * s->rules (doubling it).  Stops (1) when out of memory. */
static int collect_limits(const sl_rule_node *node, void *ctx)
{
    collect *c = ctx;
    summary *s = c->s;
    if (node->domain != c->dom) return 0;
    for (int j = 0; j < node->nlimits; j++) {
        if (s->nrules == c->cap) {
            size_t ncap = c->cap ? 2 * c->cap : 64;
            rule_stat *nr = realloc(s->rules, ncap * sizeof *nr);
            if (nr == NULL) {
                c->failed = 1;
                return 1;
            }
            s->rules = nr;
            c->cap = ncap;
        }
        memset(&s->rules[s->nrules], 0, sizeof s->rules[s->nrules]);
        s->rules[s->nrules++].rl = &node->limits[j];
    }
    return 0;
}

/* Lists every limit of dom and indexes them.  Returns 0 or -1 (no memory). */
static int summary_init(summary *s, const sl_rules *r, const sl_rule_domain *dom)
{
    collect c = {s, dom, 0, 0};
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < TOP_SLOTS; i++) s->slot[i] = -1;
    sl_rules_foreach(r, collect_limits, &c);
    if (c.failed) return -1;
    s->rcap = 16;
    while (s->rcap < 2 * s->nrules) s->rcap *= 2;
    s->rkey = calloc(s->rcap, sizeof *s->rkey);
    s->rval = calloc(s->rcap, sizeof *s->rval);
    if (s->rkey == NULL || s->rval == NULL) return -1;
    for (size_t i = 0; i < s->nrules; i++) {
        size_t j = ptr_hash(s->rules[i].rl, s->rcap);
        while (s->rkey[j] != NULL) j = (j + 1) & (s->rcap - 1);
        s->rkey[j] = s->rules[i].rl;
        s->rval[j] = (uint32_t)i;
    }
    return 0;
}

/* Frees what summary_init and top_add allocated (not s itself). */
static void summary_free(summary *s)
{
    free(s->rules);
    free(s->rkey);
    free(s->rval);
    free(s->keys);
}

/* The counts of limit rl, or NULL if rl is not a limit of the domain. */
static rule_stat *rule_of(summary *s, const sl_rule_limit *rl)
{
    if (rl == NULL) return NULL;
    for (size_t j = ptr_hash(rl, s->rcap); s->rkey[j] != NULL; j = (j + 1) & (s->rcap - 1))
        if (s->rkey[j] == rl) return &s->rules[s->rval[j]];
    return NULL;
}

static inline int heap_less(const summary *s, uint32_t a, uint32_t b)
{
    return s->keys[s->heap[a]].count < s->keys[s->heap[b]].count;
}

static void heap_swap(summary *s, uint32_t a, uint32_t b)
{
    uint32_t x = s->heap[a], y = s->heap[b];
    s->heap[a] = y;
    s->heap[b] = x;
    s->keys[y].heap_at = a;
    s->keys[x].heap_at = b;
}

static void heap_up(summary *s, uint32_t i)
{
    while (i > 0 && heap_less(s, i, (i - 1) / 2)) {
        heap_swap(s, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(summary *s, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < s->nkeys && heap_less(s, l, m)) m = l;
        if (r < s->nkeys && heap_less(s, r, m)) m = r;
        if (m == i) return;
        heap_swap(s, i, m);
        i = m;
    }
}

/* Removes index slot i, shifting back the entries of its probe run (Knuth's
 * algorithm R), so lookups need no tombstones. */
static void slot_delete(summary *s, uint32_t i)
{
    const uint32_t mask = TOP_SLOTS - 1;
    for (uint32_t j = (i + 1) & mask; s->slot[j] >= 0; j = (j + 1) & mask) {
        uint32_t home = (uint32_t)(s->keys[s->slot[j]].hash & mask);
        int stays = i < j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            s->slot[i] = s->slot[j];
            i = j;
        }
    }
    s->slot[i] = -1;
}

/* Counts one denial (OVER_LIMIT, or SHADOW if shadow) of key.  Returns 0,
 * or -1 when the table cannot be allocated. */
static int top_add(summary *s, const char *key, size_t klen, int shadow)
{
    const uint32_t mask = TOP_SLOTS - 1;
    if (s->keys == NULL && (s->keys = malloc(TOP_TRACK * sizeof *s->keys)) == NULL) return -1;
    uint64_t h = sl__fnv1a(key, klen);
    uint32_t j = (uint32_t)(h & mask);
    for (; s->slot[j] >= 0; j = (j + 1) & mask) {
        top_key *k = &s->keys[s->slot[j]];
        if (k->hash == h && k->klen == klen && memcmp(k->key, key, klen) == 0) {
            k->count++;
            if (shadow)
                k->shadow++;
            else
                k->over++;
            heap_down(s, k->heap_at);
            return 0;
        }
    }
    uint32_t idx;
    top_key *k;
    if (s->nkeys < TOP_TRACK) {
        idx = s->nkeys++;
        k = &s->keys[idx];
        k->count = k->err = 0;
        s->heap[idx] = idx;
        k->heap_at = idx;
    } else {
        /* the least denied key gives its place */
        idx = s->heap[0];
        k = &s->keys[idx];
        uint32_t i = (uint32_t)(k->hash & mask);
        while (s->slot[i] != (int32_t)idx) i = (i + 1) & mask;
        slot_delete(s, i);
        k->err = k->count;
        s->replaced++;
        j = (uint32_t)(h & mask);
        while (s->slot[j] >= 0) j = (j + 1) & mask;
    }
    s->slot[j] = (int32_t)idx;
    k->hash = h;
    k->klen = (uint32_t)klen;
    memcpy(k->key, key, klen);
    k->count++;
    k->over = !shadow;
    k->shadow = !!shadow;
    heap_up(s, k->heap_at);
    heap_down(s, k->heap_at);
    return 0;
}

/* Counts one answered request.  Denied descriptors' counting keys are
 * rebuilt (one more match, one key) for the top list.  Returns 0, or -1
 * when out of memory. */
static int summary_add(summary *s, const sl_rules *r, const sl_rule_domain *dom,
                       const sl__whatif_req *req, const sl_result *overall,
                       const sl_check_status *st)
{
    s->requests++;
    s->allowed += overall->allowed != 0;
    for (int i = 0; i < req->ndesc; i++) {
        const sl_check_status *c = &st[i];
        s->descriptors++;
        if ((unsigned)c->code <= SL_CHECK_OVER_QUOTA) s->by_code[c->code]++;
        rule_stat *rs = rule_of(s, c->rule);
        if (rs != NULL) {
            rs->matched++;
            if (c->code == SL_CHECK_OVER_LIMIT)
                rs->denied++;
            else if (overall->allowed)
                rs->allowed++;
            else
                rs->elsewhere++;
            rs->shadow += c->code == SL_CHECK_SHADOW;
            rs->elastic += c->code == SL_CHECK_ELASTIC;
        }
        if (c->code != SL_CHECK_OVER_LIMIT && c->code != SL_CHECK_SHADOW) continue;
        const sl_rule_node *node =
            sl_rules_match(r, dom->name, dom->namelen, req->desc[i], req->nent[i]);
        int lim = -1;
        for (int j = 0; node != NULL && j < node->nlimits && lim < 0; j++)
            if (&node->limits[j] == c->rule) lim = j;
        char key[SL_MAX_KEY];
        size_t klen;
        if (lim < 0 ||
            sl_rules_key(node, req->desc[i], req->nent[i], lim, key, sizeof key, &klen) != 0)
            continue; /* cannot happen: the check built the same key */
        if (top_add(s, key, klen, c->code == SL_CHECK_SHADOW) != 0) return -1;
    }
    return 0;
}

/* s (len bytes) for a terminal, cut to SHOW_MAX bytes (text.h).  out:
 * SHOW_MAX * 4 + 4 bytes. */
static const char *show(const char *s, size_t len, char *out)
{
    return sl__quote_n(s, len, SHOW_MAX, out);
}

/* Orders keys for the top list: most denials (upper bound) first, then the
 * key's bytes (sl__top_insert's order). */
static int more_denied(const void *x, const void *y, const void *ctx)
{
    const top_key *a = x, *b = y;
    (void)ctx;
    if (a->count != b->count) return a->count > b->count;
    size_t n = a->klen < b->klen ? a->klen : b->klen;
    int c = memcmp(a->key, b->key, n);
    return c != 0 ? c < 0 : a->klen < b->klen;
}

typedef struct whatif_opts {
    const char *rules;  /* --rules PATH */
    const char *domain; /* --domain D */
    const char *capacity;
    sl_params pool; /* --capacity, parsed */
    sl__whatif_format fmt;
    size_t max_memory;
    int summary;
    unsigned flags;   /* SL_RULES_*: --merge-domains, --count-denied */
    const char *file; /* NULL or "-": standard input */
} whatif_opts;

static void summary_print(const summary *s, const whatif_opts *o, uint64_t lines, double secs,
                          const sl_store_stats *st)
{
    char q[SHOW_MAX * 4 + 4], lim[160];
    FILE *f = stderr;

    fprintf(f, "\nsluicectl replay summary: rules %s, domain %s", o->rules,
            show(o->domain, strlen(o->domain), q));
    if (o->capacity) fprintf(f, ", capacity %s", o->capacity);
    fprintf(f, "\n");
    sl__print_totals(f, 13, s->requests, s->allowed, lines);
    fprintf(f, "  descriptors  %12llu  ", (unsigned long long)s->descriptors);
    for (int c = 0; c <= SL_CHECK_OVER_QUOTA; c++)
        fprintf(f, " %s %llu%s", sl_check_code_name((sl_check_code)c),
                (unsigned long long)s->by_code[c], c < SL_CHECK_OVER_QUOTA ? "," : "\n");
    fprintf(f, "  keys         %12llu   (counters in the store)\n", (unsigned long long)st->keys);
    if (st->evictions)
        fprintf(f, "  evicted      %12llu   (counters dropped to stay under --max-memory)\n",
                (unsigned long long)st->evictions);
    fprintf(f, "  time         %12.3f s  %.2f M requests/s\n", secs,
            secs > 0 ? (double)s->requests / secs / 1e6 : 0.0);

    fprintf(f, "  rules (a descriptor counts for the limit its answer names; elsewhere: "
               "passed it, denied by another):\n");
    fprintf(f, "    %10s %10s %10s %10s %10s %10s  %s\n", "matched", "allowed", "denied",
            "elsewhere", "shadow", "elastic", "rule (limit)");
    for (size_t i = 0; i < s->nrules; i++) {
        const rule_stat *r = &s->rules[i];
        sl_rules_limit_format(r->rl, lim, sizeof lim);
        fprintf(f, "    %10llu %10llu %10llu %10llu %10llu %10llu  %s (%s)\n",
                (unsigned long long)r->matched, (unsigned long long)r->allowed,
                (unsigned long long)r->denied, (unsigned long long)r->elsewhere,
                (unsigned long long)r->shadow, (unsigned long long)r->elastic,
                show(r->rl->name, strlen(r->rl->name), q), lim);
    }
    fprintf(f, "    %10llu %10s %10s %10s %10s %10s  no rule\n",
            (unsigned long long)s->by_code[SL_CHECK_NO_RULE], "", "", "", "", "");

    /* The TOP_KEYS most denied keys. */
    const void *top[TOP_KEYS];
    size_t ntop = 0;
    for (uint32_t i = 0; i < s->nkeys; i++)
        ntop = sl__top_insert(top, ntop, TOP_KEYS, &s->keys[i], more_denied, NULL);
    if (ntop == 0) {
        fprintf(f, "  no counting key was denied\n");
        return;
    }
    fprintf(f, "  top %zu counting keys by denials (OVER_LIMIT + SHADOW):\n", ntop);
    fprintf(f, "    %10s %10s  %s\n", "denied", "shadow", "key");
    for (size_t i = 0; i < ntop; i++) {
        const top_key *k = top[i];
        fprintf(f, "    %10llu %10llu  %s", (unsigned long long)k->over,
                (unsigned long long)k->shadow, show(k->key, k->klen, q));
        if (k->err)
            fprintf(f, "  (and up to %llu more before it was tracked)", (unsigned long long)k->err);
        fputc('\n', f);
    }
    if (s->replaced)
        fprintf(f,
                "  (more than %d keys were denied: the list tracks %d at a time, so a key's "
                "counts may miss its denials from before it was tracked)\n",
                TOP_TRACK, TOP_TRACK);
}

/* ---- options ------------------------------------------------------------ */

const char sl__whatif_usage[] =
    "usage: sluicectl replay --rules PATH --domain D [--capacity N/DURATION]\n"
    "                        [--merge-domains yes|no] [--count-denied yes|no]\n"
    "                        [--log-format lines|combined] [--summary]\n"
    "                        [--max-memory BYTES] [FILE]\n"
    "\n"
    "What-if replay of a rules file: decides every request of a trace exactly as\n"
    "sluiced's RL.CHECK would with the same rules (--rules PATH, AT t), in input\n"
    "order, and prints one answer per request.\n"
    "\n"
    "Input: FILE, or standard input if FILE is absent or '-'.  --log-format:\n"
    "  lines (default)  T k=v[,k=v...] [k=v[,k=v...] ...] [cost=N]\n"
    "                   T: time in integer ms; then one field per descriptor,\n"
    "                   entries separated by ',', each key=value (split at the\n"
    "                   first '=', the value may be empty); %XX stands for byte XX\n"
    "                   in keys and values (%2C ',', %3D '=', %20 ' ', %25 '%');\n"
    "                   a last field cost=N sets the cost (default 1).\n"
    "  combined         nginx's combined access log; each line is the request\n"
    "                   remote_address=ADDR method=METHOD path=PATH (PATH without\n"
    "                   its query string), at $time_local, cost 1.\n"
    "  Blank lines and lines starting with '#' are skipped.\n"
    "Output, one line per request:\n"
    "    ALLOWED LIMIT REMAINING RETRY_AFTER_MS RESET_AFTER_MS DELAY_MS CODE:RULE ...\n"
    "  with one CODE:RULE per descriptor, in request order: CODE is OK, OVER_LIMIT,\n"
    "  SHADOW, ELASTIC, UNLIMITED, NO_RULE or OVER_QUOTA, RULE the limit's name (blanks,\n"
    "  control bytes and '%' written %XX), '-' for NO_RULE.\n"
    "\n"
    "Options:\n"
    "  --rules PATH        a rules file, or a folder of *.yaml (docs/rules.md)\n"
    "  --domain D          the domain every request is checked in (required)\n"
    "  --capacity N/DUR    the spare-capacity pool of elastic limits, e.g. 5000/1s\n"
    "  --merge-domains yes|no\n"
    "                      a domain in several rules files is one domain, their\n"
    "                      descriptors together (Lyft's MERGE_DOMAIN_CONFIG), as\n"
    "                      sluiced --merge-domains (default no)\n"
    "  --count-denied yes|no\n"
    "                      Lyft's counting: every matched fixed-window counter is\n"
    "                      charged on every request, denied ones too, as sluiced\n"
    "                      --count-denied (default no: all or none)\n"
    "  (a yes/no option alone means yes; --name=VALUE works too)\n"
    "  --log-format F      lines (default) or combined\n"
    "  --max-memory BYTES  bound the memory for counters (suffix k, m or g;\n"
    "                      k = 1024, m = 2^20, g = 2^30);\n"
    "                      those at rest go first, then the least restricted are\n"
    "                      evicted, and answers are no longer exact.  Default:\n"
    "                      every counter is kept\n"
    "  --summary           when done, print totals, a table per rule and the most\n"
    "                      denied counting keys to standard error\n"
    "  -h, --help          print this text\n"
    "A progress bar is drawn on standard error when it is a terminal and FILE is\n"
    "a regular file of 16 MiB or more.\n"
    "\n"
    "Exit status: 0 done; 2 bad option, bad rules file or malformed line\n"
    "(\"sluicectl: line N: ...\" on standard error after every line before it has\n"
    "been answered); 1 any other failure (out of memory, read or write error).\n";

/* Options of this mode taking a value (the first MODE_OPTS select the
 * mode), then `sluicectl replay`'s own, which are refused here (they take a
 * value too, so that the message names the option rather than its value). */
static const char *const own_value[] = {"rules", "domain", "capacity", "log-format", "max-memory"};
#define MODE_OPTS 4
static const char *const refused_value[] = {"algo",  "limit",     "window",
                                            "burst", "precision", "threads"};
/* This mode's yes/no options (they select it too): sluiced's, with its
 * meanings -- each the loader's flag of the same name. */
static const struct {
    const char *name, *arg;
    unsigned bit;
} own_flag[] = {{"merge-domains", "--merge-domains", SL_RULES_MERGE_DOMAINS},
                {"count-denied", "--count-denied", SL_RULES_COUNT_DENIED}};
#define NFLAGS (sizeof own_flag / sizeof own_flag[0])

/* Which of own_flag --name is, plus one; 0 for none. */
static int flag_index(const char *name, size_t nlen)
{
    for (size_t f = 0; f < NFLAGS; f++)
        if (strlen(own_flag[f].name) == nlen && memcmp(own_flag[f].name, name, nlen) == 0)
            return (int)f + 1;
    return 0;
}

static int is_flag(const char *name, size_t nlen) { return flag_index(name, nlen) != 0; }

int sl__whatif_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) return 0;
        if (strncmp(a, "--", 2) != 0) continue;
        size_t n = strcspn(a + 2, "=");
        if (sl__name_in(a + 2, n, own_value, MODE_OPTS) || flag_index(a + 2, n)) return 1;
    }
    return 0;
}

/* Whether --name is one of `sluicectl replay`'s own options, refused here. */
static int refused_opt(const char *name, size_t nlen)
{
    return sl__name_in(name, nlen, refused_value, sizeof refused_value / sizeof refused_value[0]);
}

static int takes_value(const char *name, size_t nlen)
{
    return sl__name_in(name, nlen, own_value, sizeof own_value / sizeof own_value[0]) ||
           refused_opt(name, nlen);
}

/* Fills o from argv.  Returns -1 when --help was printed, 0, or 2 after
 * printing what is wrong. */
static int parse_opts(int argc, char **argv, whatif_opts *o)
{
    const char *rules_only = NULL; /* the first option that needs --rules */
    const char *refused = NULL;    /* the first of `sluicectl replay`'s own options */
    size_t refused_len = 0;
    memset(o, 0, sizeof *o);
    o->fmt = SL_WHATIF_LINES;

    sl__args w = {.argc = argc,
                  .argv = argv,
                  .takes = takes_value,
                  .flag = is_flag,
                  .see = "sluicectl replay --rules PATH --help"};
    sl__opt op;
    char err[512];
    int rc;
    while ((rc = sl__opts_next(&w, &op, sl__whatif_usage)) == 1) {
        const char *val = op.val;
        int f;
        int theirs = refused_opt(op.name, op.nlen) || sl__opt_is(&op, "log-rejected");
        if (theirs && refused == NULL) {
            refused = op.name;
            refused_len = op.nlen;
        }

        if (sl__opt_is(&op, "rules")) {
            o->rules = val;
        } else if (sl__opt_is(&op, "domain")) {
            o->domain = val;
            if (rules_only == NULL) rules_only = "--domain";
        } else if (sl__opt_is(&op, "capacity")) {
            if (sl_check_pool_parse(val, &o->pool, err, sizeof err) != 0)
                return sl__usage_error("--capacity: %s", err);
            o->capacity = val;
            if (rules_only == NULL) rules_only = "--capacity";
        } else if (sl__opt_is(&op, "log-format")) {
            if (sl__whatif_format_parse(val, strlen(val), &o->fmt) != 0)
                return sl__usage_error("unknown log format '%s' (expected lines or combined)", val);
            if (rules_only == NULL) rules_only = "--log-format";
        } else if (sl__opt_is(&op, "max-memory")) {
            if (sl__opt_max_memory(val, &o->max_memory)) return 2;
        } else if (sl__opt_is(&op, "summary")) {
            o->summary = 1;
        } else if ((f = flag_index(op.name, op.nlen)) != 0) {
            int yes = 1; /* a bare flag */
            if (op.val != NULL && sl__bool_parse(op.val, strlen(op.val), &yes) != 0)
                return sl__usage_error("invalid %s '%s': expected yes or no", own_flag[f - 1].arg,
                                       op.val);
            o->flags = yes ? o->flags | own_flag[f - 1].bit : o->flags & ~own_flag[f - 1].bit;
            if (rules_only == NULL) rules_only = own_flag[f - 1].arg;
        } else if (!theirs) {
            return sl__usage_error("unknown option '%s' (see %s)", op.arg, w.see);
        }
    }
    if (rc != 0) return rc;
    o->file = w.file;
    if (o->rules == NULL)
        return sl__usage_error("%s needs --rules PATH (what-if replay of a rules file)",
                               rules_only ? rules_only : "this mode");
    if (refused != NULL && refused_len == 7 && memcmp(refused, "threads", 7) == 0)
        return sl__usage_error("--threads cannot be used with --rules (rules are decided in input "
                               "order, on one thread)");
    if (refused != NULL)
        return sl__usage_error("--%.*s cannot be used with --rules (each rule of the file sets its "
                               "own algorithm and limit)",
                               (int)refused_len, refused);
    if (o->domain == NULL)
        return sl__usage_error("missing --domain (the rules domain every request is checked in)");
    return 0;
}

/* ---- the command -------------------------------------------------------- */

typedef struct run {
    const whatif_opts *o;
    const sl_rules *rules;
    const sl_rule_domain *dom;
    sl_store *store;
    sl__whatif_req *req;
    reader rd;
    sl__out *out;
    progress pg;
    summary *sum;
    uint64_t refused;       /* requests answered ERR */
    uint64_t refused_line;  /* the first of them */
    char refused_err[320];  /* ... and why */
} run;

/* Reads the input to its end, answering every request.  Returns the exit
 * status, after printing what went wrong. */
static int replay_rules(run *r)
{
    const whatif_opts *o = r->o;
    const sl_params *pool = o->capacity ? &o->pool : NULL;
    sl_check_status st[SL_WHATIF_MAX_DESC];
    sl_result overall;
    char err[320];
    for (;;) {
        const char *line;
        size_t len;
        int rc = next_line(&r->rd, r->out, &r->pg, &line, &len);
        if (rc == 0) {
            if (r->refused > 0) {
                if (sl__out_flush(r->out) != 0) return 1;
                progress_clear(&r->pg);
                fprintf(stderr,
                        "sluicectl: %llu request%s answered ERR, as RL.CHECK would refuse them; "
                        "the first at line %llu: %s\n",
                        (unsigned long long)r->refused, r->refused == 1 ? "" : "s",
                        (unsigned long long)r->refused_line, r->refused_err);
            }
            return 0;
        }
        if (rc < 0) {
            sl__out_flush(r->out);
            progress_clear(&r->pg);
            fprintf(stderr, "sluicectl: cannot read %s: %s\n", r->rd.name, strerror(errno));
            return 1;
        }
        r->rd.lineno++;
        rc = sl__whatif_parse(o->fmt, line, len, r->req, err, sizeof err);
        if (rc == SL_WHATIF_SKIP) continue;
        const char *what = err, *hint = "";
        int status = 2;
        if (rc == SL_WHATIF_REQ) {
            rc = sl_rules_check(r->rules, r->store, pool, r->dom->name, r->dom->namelen,
                                r->req->desc, r->req->nent, r->req->ndesc, r->req->cost, r->req->t,
                                &overall, st, err, sizeof err);
            if (rc == 0) {
                put_answer(r->out, &overall, st, r->req->ndesc);
                if (r->out->len >= SL__OUT_FLUSH && sl__out_flush(r->out) != 0) return 1;
                if (r->sum == NULL ||
                    summary_add(r->sum, r->rules, r->dom, r->req, &overall, st) == 0)
                    continue;
                what = "out of memory for --summary";
                status = 1;
            } else {
                if (err[0] == '\0') snprintf(err, sizeof err, "%s", sl_strerror(rc));
                if (rc != SL_ENOMEM) {
                    /* as sluiced answers -ERR to that one request: an ERR
                     * line, and on with the next */
                    size_t n = strlen(err);
                    char *p = sl__out_reserve(r->out, n + 5);
                    memcpy(p, "ERR ", 4);
                    memcpy(p + 4, err, n);
                    p[4 + n] = '\n';
                    r->out->len += n + 5;
                    if (r->refused++ == 0) {
                        r->refused_line = r->rd.lineno;
                        snprintf(r->refused_err, sizeof r->refused_err, "%s", err);
                    }
                    if (r->out->len >= SL__OUT_FLUSH && sl__out_flush(r->out) != 0) return 1;
                    continue;
                }
                status = 1;
                if (o->max_memory) hint = " (is --max-memory too small?)";
            }
        }
        sl__out_flush(r->out);
        progress_clear(&r->pg);
        fprintf(stderr, "sluicectl: line %llu: %s%s\n", (unsigned long long)r->rd.lineno, what,
                hint);
        return status;
    }
}

/* Loads the rules and finds the domain.  Returns the set, or NULL after
 * printing what is wrong. */
static sl_rules *load_rules(const whatif_opts *o, const sl_rule_domain **dom)
{
    char err[1024];
    sl_rules *rules = sl_rules_load_flags(o->rules, o->flags, err, sizeof err);
    if (rules == NULL) {
        fprintf(stderr, "sluicectl: %s\n", err);
        return NULL;
    }
    *dom = sl_rules_find_domain(rules, o->domain, strlen(o->domain));
    if (*dom != NULL) return rules;
    int n = sl_rules_ndomains(rules);
    char q[SHOW_MAX * 4 + 4];
    fprintf(stderr, "sluicectl: domain '%s' is not in %s", show(o->domain, strlen(o->domain), q),
            o->rules);
    if (n == 0) fprintf(stderr, " (it defines no domain)\n");
    for (int i = 0; i < n && i < 10; i++)
        fprintf(stderr, "%s%s", i == 0 ? " (it defines: " : ", ", sl_rules_domain(rules, i)->name);
    if (n > 10) fprintf(stderr, ", ... %d in all", n);
    if (n > 0) fprintf(stderr, ")\n");
    sl_rules_unref(rules);
    return NULL;
}

int sl__whatif_main(int argc, char **argv)
{
    whatif_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc != 0) return rc < 0 ? 0 : rc;

    run r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    sl_rules *rules = load_rules(&o, &r.dom);
    if (rules == NULL) return 2;
    r.rules = rules;

    r.rd.fd = sl__input_open(o.file, &r.rd.name);
    if (r.rd.fd < 0) {
        sl_rules_unref(rules);
        return 2;
    }
    struct stat sb;
    if (isatty(2) && fstat(r.rd.fd, &sb) == 0 && S_ISREG(sb.st_mode) &&
        (uint64_t)sb.st_size >= PROGRESS_MIN) {
        r.pg.on = 1;
        r.pg.total = (uint64_t)sb.st_size;
        r.pg.out_tty = isatty(1);
    }

    sl_store_opts so;
    memset(&so, 0, sizeof so);
    so.max_bytes = o.max_memory;
    so.locking = SL_LOCK_SHARD; /* one thread */
    int err = 0;
    r.store = sl_store_new(&so, &err);
    r.req = malloc(sizeof *r.req);
    r.out = calloc(1, sizeof *r.out);
    r.rd.buf = malloc(READ_CAP);
    summary *sum = o.summary ? malloc(sizeof *sum) : NULL;
    int sum_ok = sum != NULL && summary_init(sum, rules, r.dom) == 0;
    if (r.store == NULL) {
        rc = sl__store_failed(err, o.max_memory);
    } else if (r.req == NULL || r.out == NULL || r.rd.buf == NULL || (o.summary && !sum_ok)) {
        fprintf(stderr, "sluicectl: out of memory\n");
        rc = 1;
    } else {
        r.out->fd = 1;
        r.out->before = progress_before_write;
        r.out->ctx = &r.pg;
        r.sum = sum;
        r.pg.t0 = sl__mono_ns();
        progress_tick(&r.pg, 0, 0);
        rc = replay_rules(&r);
        double secs = (double)(sl__mono_ns() - r.pg.t0) / 1e9;
        progress_clear(&r.pg);
        if (sl__out_flush(r.out) != 0) {
            fprintf(stderr, "sluicectl: cannot write the answers: %s\n", strerror(r.out->failed));
            rc = 1;
        }
        sl_store_stats st;
        sl_store_stats_get(r.store, &st);
        sl__warn_evicted(st.evictions, "counters");
        if (sum != NULL && rc == 0) summary_print(sum, &o, r.rd.lineno, secs, &st);
    }

    if (sum != NULL) summary_free(sum); /* summary_init ran: every field is set */
    free(sum);
    free(r.rd.buf);
    free(r.out);
    free(r.req);
    sl_store_free(r.store);
    sl_rules_unref(rules);
    if (r.rd.fd > 0) close(r.rd.fd);
    return rc;
}
