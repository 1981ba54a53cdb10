/*
 * check.c -- RL.CHECK's evaluation; semantics in check.h.
 */
#include "check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *sl_check_code_name(sl_check_code c)
{
    switch (c) {
    case SL_CHECK_OK: return "OK";
    case SL_CHECK_OVER_LIMIT: return "OVER_LIMIT";
    case SL_CHECK_SHADOW: return "SHADOW";
    case SL_CHECK_ELASTIC: return "ELASTIC";
    case SL_CHECK_UNLIMITED: return "UNLIMITED";
    case SL_CHECK_NO_RULE: return "NO_RULE";
    }
    return "?";
}

/* One counted limit of the request. */
typedef struct item {
    int desc;                 /* descriptor index */
    const sl_rule_limit *rl;  /* the limit */
    sl_params p;              /* its parameters, L = soft_limit when soft */
    char key[SL_MAX_KEY];
    size_t keylen;
    int shadow;               /* node in shadow mode: never denies */
    int zero;                 /* L = 0: denied, never, no engine call */
    int lead;                 /* index of the item holding the counter (itself
                                 unless the same counter came earlier) */
    int elastic;              /* may pass up to its elastic ceiling (pool given) */
    int stretched;            /* passed above L, on the pool: status ELASTIC */
    int64_t cost;             /* leaders: the merged cost */
    sl_result res;
} item;

static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int sl_check_pool_parse(const char *s, sl_params *pool, char *err, size_t errlen)
{
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (s == NULL || pool == NULL) return fail(err, errlen, SL_EINVAL, "invalid argument");
    const char *slash = strchr(s, '/');
    int64_t n, w;
    if (slash == NULL)
        return fail(err, errlen, SL_EINVAL,
                    "capacity '%.64s' must be N/DURATION, e.g. 5000/1s", s);
    if (sl_int_parse(s, (size_t)(slash - s), SL_MAX_LIMIT, &n) != 0 || n < 1)
        return fail(err, errlen, SL_EINVAL,
                    "capacity '%.64s': N must be a whole number from 1 to %lld", s,
                    (long long)SL_MAX_LIMIT);
    if (sl_duration_parse(slash + 1, strlen(slash + 1), &w) != 0)
        return fail(err, errlen, SL_EINVAL,
                    "capacity '%.64s': '%.32s' is not a duration (e.g. 1s, 500ms, 1m)", s,
                    slash + 1);
    memset(pool, 0, sizeof *pool);
    pool->algo = SL_FIXED_WINDOW;
    pool->limit = n;
    pool->window_ms = w;
    return 0;
}

static int same_params(const sl_params *a, const sl_params *b)
{
    return a->algo == b->algo && a->limit == b->limit && a->window_ms == b->window_ms &&
           a->burst == b->burst && a->precision == b->precision &&
           a->log_rejected == b->log_rejected;
}

/* Is a more restrictive than b among denials?  -1 (never) is the largest. */
static int later_retry(int64_t a, int64_t b)
{
    if (b < 0) return 0;
    if (a < 0) return 1;
    return a > b;
}

/* The pool's counter.  No rule's key can be this: those always hold '='. */
static const char pool_key[] = "|spare-capacity";

/* Is limit rl (a named one) replaced by a limit of any node matched for
 * this request (Lyft's `replaces`)? */
static int replaced(const sl_rule_limit *rl, const sl_rule_node *const *nodes, int n)
{
    if (!rl->named) return 0;
    for (int i = 0; i < n; i++) {
        if (nodes[i] == NULL) continue;
        for (int j = 0; j < nodes[i]->nlimits; j++) {
            const sl_rule_limit *o = &nodes[i]->limits[j];
            for (int k = 0; k < o->nreplaces; k++)
                if (strcmp(o->replaces[k], rl->name) == 0) return 1;
        }
    }
    return 0;
}

static void set_status(sl_check_status *st, sl_check_code code, const item *it)
{
    st->code = code;
    st->rule = it->rl;
    st->name = it->rl->name;
    st->result = it->res;
    st->limit = it->res.limit;
    st->remaining = it->res.remaining;
    st->retry_after_ms = it->res.retry_after_ms;
    st->reset_after_ms = it->res.reset_after_ms;
}

int sl_rules_check(const sl_rules *r, sl_store *s, const sl_params *pool, const char *domain,
                   size_t dlen, const sl_rule_entry *const *descs, const int *ndesc, int n,
                   int64_t cost, int64_t now_ms, sl_result *overall, sl_check_status *st,
                   char *err, size_t errlen)
{
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (r == NULL || s == NULL || (domain == NULL && dlen > 0) || descs == NULL ||
        ndesc == NULL || n < 1 || overall == NULL || st == NULL)
        return fail(err, errlen, SL_EINVAL, "invalid argument");
    if (cost < 0 || cost > SL_MAX_LIMIT)
        return fail(err, errlen, SL_ECOST, "%s", sl_strerror(SL_ECOST));
    if (now_ms <= -SL_MAX_TIME_MS || now_ms >= SL_MAX_TIME_MS)
        return fail(err, errlen, SL_ETIME, "%s", sl_strerror(SL_ETIME));
    sl_params pool1;
    if (pool != NULL) { /* the pool too is a rule counter: space 1 */
        pool1 = *pool;
        pool1.space = 1;
        pool = &pool1;
    }

    item it[SL_MAX_BATCH];
    int nit = 0;
    int denied_never = 0; /* an enforced L = 0 limit matched */
    const sl_rule_node *nodes[SL_CHECK_MAX_DESC];
    if (n > SL_CHECK_MAX_DESC)
        return fail(err, errlen, SL_EINVAL, "more than %d descriptors in one request",
                    SL_CHECK_MAX_DESC);

    /* Match every descriptor (all first: `replaces` looks across them). */
    for (int i = 0; i < n; i++) {
        memset(&st[i], 0, sizeof st[i]);
        if (ndesc[i] < 1 || ndesc[i] > SL_RULES_MAX_DEPTH || descs[i] == NULL)
            return fail(err, errlen, SL_EINVAL,
                        "descriptor %d must have 1 to %d entries", i + 1, SL_RULES_MAX_DEPTH);
        nodes[i] = sl_rules_match(r, domain, dlen, descs[i], ndesc[i]);
    }

    /* Collect the counted limits. */
    for (int i = 0; i < n; i++) {
        const sl_rule_node *node = nodes[i];
        if (node == NULL) {
            st[i].code = SL_CHECK_NO_RULE;
            continue;
        }
        st[i].shadow = node->shadow_mode != 0;
        st[i].code = SL_CHECK_UNLIMITED; /* unless a counted limit follows */
        st[i].rule = &node->limits[0];
        st[i].name = node->limits[0].name;
        int counted = 0;
        const sl_rule_limit *first_replaced = NULL;
        for (int j = 0; j < node->nlimits; j++) {
            const sl_rule_limit *rl = &node->limits[j];
            if (rl->unlimited) continue;
            if (replaced(rl, nodes, n)) {
                if (first_replaced == NULL) first_replaced = rl;
                continue;
            }
            counted++;
            if (nit == SL_MAX_BATCH)
                return fail(err, errlen, SL_EINVAL,
                            "more than %d limits in one request", SL_MAX_BATCH);
            item *t = &it[nit];
            memset(t, 0, sizeof *t);
            t->desc = i;
            t->rl = rl;
            t->p = rl->params;
            t->p.space = 1; /* rule counters: out of RL.ALLOW's reach (check.h) */
            if (rl->soft_pct > 0) t->p.limit = rl->soft_limit;
            t->shadow = st[i].shadow;
            t->zero = t->p.limit == 0;
            t->elastic = pool != NULL && rl->elastic_limit > 0 && !t->shadow && !t->zero;
            t->cost = cost;
            t->lead = nit;
            if (t->zero) {
                /* denied, never: no engine call */
                t->res.allowed = 0;
                t->res.retry_after_ms = -1;
                if (!t->shadow) denied_never = 1;
            } else {
                int rc = sl_rules_key(node, descs[i], ndesc[i], j, t->key, sizeof t->key,
                                      &t->keylen);
                if (rc < 0)
                    return fail(err, errlen, rc, "descriptor %d, limit %s: %s", i + 1,
                                rl->name, sl_strerror(rc));
                /* the same counter earlier in the request: merge the costs */
                for (int k = 0; k < nit; k++) {
                    item *o = &it[k];
                    if (o->zero || o->lead != k || o->p.algo != t->p.algo ||
                        o->keylen != t->keylen || memcmp(o->key, t->key, t->keylen) != 0)
                        continue;
                    if (!same_params(&o->p, &t->p) || o->shadow != t->shadow)
                        return fail(err, errlen, SL_EINVAL,
                                    "limits %s and %s count the same key with different "
                                    "parameters",
                                    o->rl->name, rl->name);
                    t->lead = k;
                    if (o->cost > SL_MAX_LIMIT - cost)
                        return fail(err, errlen, SL_ECOST, "%s", sl_strerror(SL_ECOST));
                    o->cost += cost;
                    break;
                }
            }
            nit++;
        }
        if (counted == 0 && first_replaced != NULL) {
            /* every counted limit replaced: applied as nothing, as Lyft does */
            st[i].code = SL_CHECK_OK;
            st[i].rule = first_replaced;
            st[i].name = first_replaced->name;
        }
    }

    /* An enforced L = 0 limit denies the request: every other counter is
     * only peeked (checked, and answered as if alone). */
    if (denied_never) {
        for (int k = 0; k < nit; k++) {
            item *t = &it[k];
            if (t->zero || t->lead != k) continue;
            int rc = sl_peek(s, &t->p, t->key, t->keylen, now_ms, t->cost, &t->res);
            if (rc < 0)
                return fail(err, errlen, rc, "limit %s: %s", t->rl->name, sl_strerror(rc));
        }
    }

    /* The enforced counters, all-or-none: sl_decide_all checks every
     * request before it charges any, and when it charges none answers each
     * as if alone -- so no peek is needed first. */
    int allowed = !denied_never;
    int pool_charged = 0;
    if (allowed) {
        sl_request req[SL_MAX_BATCH];
        sl_result out[SL_MAX_BATCH];
        int idx[SL_MAX_BATCH];
        size_t nreq = 0;
        for (int k = 0; k < nit; k++) {
            item *t = &it[k];
            if (t->zero || t->shadow || t->lead != k) continue;
            req[nreq].params = &t->p;
            req[nreq].key = t->key;
            req[nreq].keylen = t->keylen;
            req[nreq].cost = t->cost;
            idx[nreq++] = k;
        }
        if (nreq > 0) {
            int all = 0;
            int rc = sl_decide_all(s, req, nreq, now_ms, out, &all);
            if (rc < 0) return fail(err, errlen, rc, "sl_decide_all: %s", sl_strerror(rc));
            for (size_t q = 0; q < nreq; q++) it[idx[q]].res = out[q];
            allowed = all != 0;

            /* Denied only by elastic limits: again, all-or-none, with those
             * at their ceilings and the spare pool charged too. */
            int stretch = !allowed && pool != NULL && nreq < SL_MAX_BATCH;
            for (size_t q = 0; q < nreq && stretch; q++)
                if (!out[q].allowed && !it[idx[q]].elastic) stretch = 0;
            if (stretch) {
                sl_params pe[SL_MAX_BATCH];
                for (size_t q = 0; q < nreq; q++) {
                    const item *t = &it[idx[q]];
                    pe[q] = t->p;
                    if (t->elastic) pe[q].limit = t->rl->elastic_limit;
                    req[q].params = &pe[q];
                }
                req[nreq].params = pool;
                req[nreq].key = pool_key;
                req[nreq].keylen = sizeof pool_key - 1;
                req[nreq].cost = cost;
                sl_result out2[SL_MAX_BATCH];
                rc = sl_decide_all(s, req, nreq + 1, now_ms, out2, &all);
                if (rc < 0) return fail(err, errlen, rc, "sl_decide_all: %s", sl_strerror(rc));
                if (all) {
                    allowed = 1;
                    pool_charged = 1;
                    for (size_t q = 0; q < nreq; q++) {
                        item *t = &it[idx[q]];
                        /* over L before (state only grows at one instant) */
                        t->stretched = !t->res.allowed;
                        t->res = out2[q];
                        if (t->stretched && out2[nreq].remaining < t->res.remaining)
                            t->res.remaining = out2[nreq].remaining;
                    }
                }
            }
            /* Within every limit: the request still uses spare capacity. */
            if (allowed && pool != NULL && !pool_charged) {
                sl_result pr;
                (void)sl_decide(s, pool, pool_key, sizeof pool_key - 1, now_ms, cost, &pr);
            }
        }
    }

    /* Shadow counters: charged when the request is allowed, else peeked.
     * Their parameters and keys were checked when the set loaded and when
     * the keys were built, so neither call fails in practice; if one did,
     * the counter answers "allowed, all zeros" and the request stands. */
    if (!denied_never) {
        for (int k = 0; k < nit; k++) {
            item *t = &it[k];
            if (t->zero || !t->shadow || t->lead != k) continue;
            int rc = allowed ? sl_decide(s, &t->p, t->key, t->keylen, now_ms, t->cost, &t->res)
                             : sl_peek(s, &t->p, t->key, t->keylen, now_ms, t->cost, &t->res);
            if (rc < 0 && allowed)
                rc = sl_peek(s, &t->p, t->key, t->keylen, now_ms, t->cost, &t->res);
            if (rc < 0) {
                memset(&t->res, 0, sizeof t->res);
                t->res.allowed = 1;
            }
        }
    }

    /* Followers take their leader's answer. */
    for (int k = 0; k < nit; k++)
        if (it[k].lead != k) it[k].res = it[it[k].lead].res;

    /* Per-limit counts (RL.RULES). */
    for (int k = 0; k < nit; k++) {
        const item *t = &it[k];
        sl_rule_counts *c = t->rl->counts;
        if (c == NULL) continue;
        atomic_fetch_add_explicit(&c->checked, 1, memory_order_relaxed);
        if (!t->res.allowed)
            atomic_fetch_add_explicit(t->shadow ? &c->shadow : &c->over, 1, memory_order_relaxed);
        else if (it[t->lead].stretched)
            atomic_fetch_add_explicit(&c->elastic, 1, memory_order_relaxed);
    }

    /* Each descriptor's status. */
    for (int i = 0; i < n; i++) {
        if (st[i].code == SL_CHECK_NO_RULE) continue;
        const item *worst = NULL; /* the over limit with the largest retry */
        const item *least = NULL; /* the limit with the smallest remaining */
        const item *over = NULL;  /* passed above its L, on the pool */
        for (int k = 0; k < nit; k++) {
            const item *t = &it[k];
            if (t->desc != i) continue;
            if (!t->res.allowed) {
                if (worst == NULL || later_retry(t->res.retry_after_ms, worst->res.retry_after_ms))
                    worst = t;
            } else if (it[t->lead].stretched) {
                if (over == NULL || t->res.remaining < over->res.remaining) over = t;
            } else if (least == NULL || t->res.remaining < least->res.remaining) {
                least = t;
            }
        }
        if (worst != NULL)
            set_status(&st[i], st[i].shadow ? SL_CHECK_SHADOW : SL_CHECK_OVER_LIMIT, worst);
        else if (over != NULL)
            set_status(&st[i], SL_CHECK_ELASTIC, over);
        else if (least != NULL)
            set_status(&st[i], SL_CHECK_OK, least);
        /* else: every limit unlimited, status stays UNLIMITED with zeros */
    }

    /* The overall answer, from the enforced descriptors only. */
    memset(overall, 0, sizeof *overall);
    const sl_check_status *pick = NULL;
    for (int i = 0; i < n; i++) {
        const sl_check_status *c = &st[i];
        if (!allowed) {
            if (c->code == SL_CHECK_OVER_LIMIT &&
                (pick == NULL || later_retry(c->retry_after_ms, pick->retry_after_ms)))
                pick = c;
        } else if ((c->code == SL_CHECK_OK || c->code == SL_CHECK_ELASTIC) && !c->shadow &&
                   c->rule != NULL && c->limit > 0 &&
                   (pick == NULL || c->remaining < pick->remaining)) {
            pick = c;
        }
    }
    if (pick != NULL) *overall = pick->result;
    overall->allowed = allowed;
    if (allowed) overall->retry_after_ms = 0;
    return 0;
}
