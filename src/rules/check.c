/*
 * check.c -- RL.CHECK's plan and report; semantics in check.h.  Both steps
 * are pure: the rounds that touch counters are a backend's
 * (src/backend/backend_local.c for the local store).
 */
#include "check.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "siphash.h"

const char *sl_check_code_name(sl_check_code c)
{
    switch (c) {
    case SL_CHECK_OK: return "OK";
    case SL_CHECK_OVER_LIMIT: return "OVER_LIMIT";
    case SL_CHECK_SHADOW: return "SHADOW";
    case SL_CHECK_ELASTIC: return "ELASTIC";
    case SL_CHECK_UNLIMITED: return "UNLIMITED";
    case SL_CHECK_NO_RULE: return "NO_RULE";
    case SL_CHECK_OVER_QUOTA: return "OVER_QUOTA";
    }
    return "?";
}

int sl__check_err(char *err, size_t errlen, int code, const char *fmt, ...)
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
    if (s == NULL || pool == NULL) return sl__check_err(err, errlen, SL_EINVAL, "invalid argument");
    const char *slash = strchr(s, '/');
    int64_t n, w;
    if (slash == NULL)
        return sl__check_err(err, errlen, SL_EINVAL,
                    "capacity '%.64s' must be N/DURATION, e.g. 5000/1s", s);
    if (sl_int_parse(s, (size_t)(slash - s), SL_MAX_LIMIT, &n) != 0 || n < 1)
        return sl__check_err(err, errlen, SL_EINVAL,
                    "capacity '%.64s': N must be a whole number from 1 to %lld", s,
                    (long long)SL_MAX_LIMIT);
    if (sl_duration_parse(slash + 1, strlen(slash + 1), &w) != 0)
        return sl__check_err(err, errlen, SL_EINVAL,
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

/* Does denial a hold the request longer than denial b?  The later retry
 * (-1 latest); on equal retries the later reset, so that the reported
 * reset_after is the latest of the limits that hold the request longest
 * (an HTTP client reads it as X-RateLimit-Reset: never before it could
 * pass). */
static int holds_longer(const sl_result *a, const sl_result *b)
{
    if (a->retry_after_ms != b->retry_after_ms)
        return later_retry(a->retry_after_ms, b->retry_after_ms);
    return a->reset_after_ms > b->reset_after_ms;
}

/* Is denial a to have room again sooner than denial b (quota mode: the
 * first to have room lets the request pass)?  The earlier retry (-1 last);
 * on equal retries the later reset, as holds_longer. */
static int frees_sooner(const sl_result *a, const sl_result *b)
{
    if (a->retry_after_ms != b->retry_after_ms)
        return later_retry(b->retry_after_ms, a->retry_after_ms);
    return a->reset_after_ms > b->reset_after_ms;
}

/* Is allowed answer a more restrictive than b?  Fewer remaining; on equal
 * remaining the later reset: with two limits both at 0 left, the one that
 * resets last is the one the next request waits for (2 a minute and 5 an
 * hour, both spent: an hour, not a minute). */
static int tighter(const sl_result *a, const sl_result *b)
{
    if (a->remaining != b->remaining) return a->remaining < b->remaining;
    return a->reset_after_ms > b->reset_after_ms;
}

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

static void set_status(sl_check_status *st, sl_check_code code, const sl_rule_limit *rl,
                       const sl_result *res)
{
    st->code = code;
    st->rule = rl;
    st->name = rl->name;
    st->result = *res;
    st->limit = res->limit;
    st->remaining = res->remaining;
    st->retry_after_ms = res->retry_after_ms;
    st->reset_after_ms = res->reset_after_ms;
}

/* Item it[nit], counted (not zero), against the leaders before it: when
 * one holds the same counter, it becomes its follower and the leader's
 * cost grows by cost.  Returns 0, or an SL_E* code with a message. */
static int merge(sl_check_item *it, int nit, int64_t cost, char *err, size_t errlen)
{
    sl_check_item *t = &it[nit];
    for (int k = 0; k < nit; k++) {
        sl_check_item *o = &it[k];
        if (o->zero || o->lead != k || o->p.algo != t->p.algo || o->keylen != t->keylen ||
            memcmp(o->key, t->key, t->keylen) != 0)
            continue;
        if (!same_params(&o->p, &t->p) || o->shadow != t->shadow) {
            if (o->rl->name[0] == '\0') /* only overrides have no name */
                return sl__check_err(err, errlen, SL_EINVAL,
                                     "descriptors %d and %d override the limit of the same "
                                     "entries with different limits",
                                     o->desc + 1, t->desc + 1);
            return sl__check_err(err, errlen, SL_EINVAL,
                                 "limits %s and %s count the same key with different "
                                 "parameters",
                                 o->rl->name, t->rl->name);
        }
        t->lead = k;
        if (o->cost > SL_MAX_LIMIT - cost)
            return sl__check_err(err, errlen, SL_ECOST, "%s", sl_strerror(SL_ECOST));
        o->cost += cost;
        break;
    }
    return 0;
}

/* The hash tag's length for the counters of domain dom (check.h, "Hash
 * tag"): the domain's bytes at the start of the key, at most the readable
 * prefix a long key keeps (SL_RULES_KEY_PREFIX), so that a domain's keys,
 * long or not, share one tag. */
static size_t tag_len(const sl_rule_domain *dom)
{
    return dom->namelen < SL_RULES_KEY_PREFIX ? dom->namelen : SL_RULES_KEY_PREFIX;
}

/* Descriptor i's override ov, in domain dom (check.h, "A limit
 * override"): its limit in plan->over[i], its one item at it[nit]. */
static int add_override(sl_check_plan *plan, const sl_rule_domain *dom, int i,
                        const sl_rule_entry *desc, int ndesc, const sl_check_override *ov, int nit,
                        int count_denied, int64_t cost, char *err, size_t errlen)
{
    sl_rule_limit *rl = &plan->over[i];
    memset(rl, 0, sizeof *rl);
    rl->name = ""; /* envoyproxy/ratelimit's name for it */
    rl->params.algo = SL_FIXED_WINDOW;
    rl->params.limit = ov->limit;
    rl->params.window_ms = sl_rule_unit_ms(ov->unit);
    rl->unit = ov->unit;
    rl->soft_limit = ov->limit;
    sl_check_status *st = &plan->pre[i];
    st->code = SL_CHECK_OK; /* the item's answer replaces it (sl_check_report) */
    st->rule = rl;
    st->name = rl->name;
    if (nit == SL_MAX_BATCH)
        return sl__check_err(err, errlen, SL_EINVAL, "more than %d limits in one request",
                             SL_MAX_BATCH);
    sl_check_item *t = &plan->items[nit];
    t->desc = i;
    t->rl = rl;
    t->p = rl->params;
    t->p.space = 1;
    t->keylen = 0;
    t->taglen = 0;
    t->shadow = t->quota = t->elastic = 0; /* an override is none of these (Lyft) */
    t->zero = ov->limit == 0;
    t->lyft = count_denied && !t->zero;
    t->cost = cost;
    t->lead = nit;
    if (t->zero) {
        plan->denied_never = 1;
        return 0;
    }
    int rc = sl_rules_override_key(dom, desc, ndesc, rl->params.window_ms, t->key, sizeof t->key,
                                   &t->keylen);
    if (rc < 0)
        return sl__check_err(err, errlen, rc, "descriptor %d, limit override: %s", i + 1,
                             sl_strerror(rc));
    t->taglen = tag_len(dom);
    return merge(plan->items, nit, cost, err, errlen);
}

/* The lease key of descriptor (node, desc) into key (SL_MAX_KEY bytes):
 * check.h, SL_CHECK_LEASE_SUFFIX.  0 or an SL_E* code. */
static int lease_key(const sl_rule_node *node, const sl_rule_entry *desc, int ndesc, char *key,
                     size_t *len)
{
    static const char suf[] = SL_CHECK_LEASE_SUFFIX;
    const size_t sl = sizeof suf - 1;
    size_t n;
    int rc = sl_rules_key(node, desc, ndesc, -1, key, SL_MAX_KEY - sl, &n);
    if (rc == 0) { /* the usual key: the counting key and the suffix */
        memcpy(key + n, suf, sl);
        *len = n + sl;
        return 0;
    }
    if (rc != SL_EKEY) return rc;
    /* too long for the suffix: the readable part, the suffix, "#~" and the
     * 256-bit digest of the whole counting key -- the digest form's own
     * when sl_rules_key wrote that form, else (a key of SL_MAX_KEY - sl + 1
     * to SL_MAX_KEY bytes, written as it is) the same function computed
     * here (check.h, "Long keys") */
    char full[SL_MAX_KEY];
    const size_t hexat = SL_RULES_KEY_PREFIX + 2;
    rc = sl_rules_key(node, desc, ndesc, -1, full, sizeof full, &n);
    if (rc < 0) return rc;
    size_t keep = SL_RULES_KEY_PREFIX - sl;
    memcpy(key, full, keep);
    memcpy(key + keep, suf, sl);
    memcpy(key + keep + sl, "#~", 2);
    if (n == SL_MAX_KEY && full[SL_RULES_KEY_PREFIX] == '#' && full[SL_RULES_KEY_PREFIX + 1] == '~') {
        memcpy(key + hexat, full + hexat, SL_MAX_KEY - hexat);
    } else {
        static const uint8_t dk[2][16] = {
            {'s', 'l', 'u', 'i', 'c', 'e', '/', 'k', 'e', 'y', 's', '/', 'n', 'o', '.', '1'},
            {'s', 'l', 'u', 'i', 'c', 'e', '/', 'k', 'e', 'y', 's', '/', 'n', 'o', '.', '2'}};
        static const char hex[] = "0123456789abcdef";
        uint8_t dig[32];
        for (int i = 0; i < 2; i++) {
            sl__sip128 h;
            sl__sip128_init(&h, dk[i]);
            sl__sip128_update(&h, full, n);
            sl__sip128_final(&h, dig + 16 * i);
        }
        for (int i = 0; i < 32; i++) {
            key[hexat + 2 * (size_t)i] = hex[dig[i] >> 4];
            key[hexat + 2 * (size_t)i + 1] = hex[dig[i] & 15];
        }
    }
    *len = SL_MAX_KEY;
    return 0;
}

/* Descriptor i's concurrency limit (node, a matched `concurrency: N`) as
 * lease plan->nleases; take: its cost is above 0.  An earlier lease of the
 * same key becomes its leader (one lease for both).  0 or an SL_E* code
 * with a message. */
static int add_lease(sl_check_plan *plan, int i, const sl_rule_node *node,
                     const sl_rule_entry *desc, int ndesc, int take, char *err, size_t errlen)
{
    int j = plan->nleases;
    sl_check_lease *l = &plan->leases[j];
    l->desc = i;
    l->lead = j;
    l->shadow = node->shadow_mode != 0;
    l->take = take;
    int rc = lease_key(node, desc, ndesc, l->key, &l->keylen);
    if (rc < 0)
        return sl__check_err(err, errlen, rc, "descriptor %d, concurrency of %s: %s", i + 1,
                             node->path, sl_strerror(rc));
    sl_rule_limit *rl = &plan->lim[j];
    memset(rl, 0, sizeof *rl);
    snprintf(plan->lname[j], sizeof plan->lname[j], "%s#concurrency", node->path);
    rl->name = plan->lname[j];
    rl->params.limit = node->concurrency;
    rl->params.window_ms = node->concurrency_ttl_ms;
    rl->soft_limit = node->concurrency;
    rl->unit = SL_UNIT_NONE;
    for (int k = 0; k < j; k++) {
        sl_check_lease *o = &plan->leases[k];
        if (o->lead == k && o->keylen == l->keylen && memcmp(o->key, l->key, l->keylen) == 0) {
            l->lead = k; /* one node: the same N, TTL and mode */
            o->take |= take;
            break;
        }
    }
    plan->nleases++;
    return 0;
}

int sl_check_plan_make(const sl_rules *r, const sl_params *pool, const char *domain, size_t dlen,
                       const sl_rule_entry *const *descs, const int *ndesc, int n, int64_t cost,
                       int64_t now_ms, sl_check_plan *plan, char *err, size_t errlen)
{
    sl_check_input in = {.pool = pool,
                         .domain = domain,
                         .dlen = dlen,
                         .descs = descs,
                         .ndesc = ndesc,
                         .n = n,
                         .cost = cost,
                         .now_ms = now_ms};
    return sl_check_plan_build(r, &in, plan, err, errlen);
}

int sl_check_plan_make_over(const sl_rules *r, const sl_params *pool, const char *domain,
                            size_t dlen, const sl_rule_entry *const *descs, const int *ndesc,
                            const sl_check_override *over, int n, int64_t cost, int64_t now_ms,
                            sl_check_plan *plan, char *err, size_t errlen)
{
    sl_check_input in = {.pool = pool,
                         .domain = domain,
                         .dlen = dlen,
                         .descs = descs,
                         .ndesc = ndesc,
                         .over = over,
                         .n = n,
                         .cost = cost,
                         .now_ms = now_ms};
    return sl_check_plan_build(r, &in, plan, err, errlen);
}

int sl_check_plan_build(const sl_rules *r, const sl_check_input *in, sl_check_plan *plan, char *err,
                        size_t errlen)
{
    if (err != NULL && errlen > 0) err[0] = '\0';
    if (r == NULL || plan == NULL || in == NULL)
        return sl__check_err(err, errlen, SL_EINVAL, "invalid argument");
    const sl_params *pool = in->pool;
    const char *domain = in->domain;
    size_t dlen = in->dlen;
    const sl_rule_entry *const *descs = in->descs;
    const int *ndesc = in->ndesc;
    const sl_check_override *over = in->over;
    int n = in->n;
    int64_t cost = in->cost, now_ms = in->now_ms;
    if ((domain == NULL && dlen > 0) || descs == NULL || ndesc == NULL ||
        sl_check_shape_desc(n) == SL_CHECK_SHAPE_NONE)
        return sl__check_err(err, errlen, SL_EINVAL, "invalid argument");
    if (in->costs == NULL && (cost < 0 || cost > SL_MAX_LIMIT))
        return sl__check_err(err, errlen, SL_ECOST, "%s", sl_strerror(SL_ECOST));
    if (now_ms <= -SL_MAX_TIME_MS || now_ms >= SL_MAX_TIME_MS)
        return sl__check_err(err, errlen, SL_ETIME, "%s", sl_strerror(SL_ETIME));
    if (sl_check_shape_desc(n) == SL_CHECK_SHAPE_MANY)
        return sl__check_err(err, errlen, SL_EINVAL, "more than %d descriptors in one request",
                    SL_CHECK_MAX_DESC);
    for (int i = 0; in->costs != NULL && i < n; i++)
        if (in->costs[i] < 0 || in->costs[i] > SL_MAX_LIMIT)
            return sl__check_err(err, errlen, SL_ECOST, "descriptor %d: %s", i + 1,
                                 sl_strerror(SL_ECOST));
    plan->n = n;
    plan->nitems = 0;
    plan->denied_never = 0;
    plan->nquota = 0;
    plan->nmetric = 0;
    plan->nleases = 0;
    int count_denied = (sl_rules_flags(r) & SL_RULES_COUNT_DENIED) != 0 || in->lyft;
    plan->cost = cost; /* with per-descriptor costs: set below (the pool's charge) */
    plan->now_ms = now_ms;
    plan->has_pool = pool != NULL;
    if (pool != NULL) { /* the pool too is a rule counter: space 1 */
        plan->pool = *pool;
        plan->pool.space = 1;
    }
    sl_check_item *it = plan->items;
    sl_check_status *st = plan->pre;
    const sl_rule_node **nodes = plan->node;

    /* Match every descriptor (all first: `replaces` looks across them);
     * one given an override matches nothing (its node stays NULL). */
    const sl_rule_domain *dom = NULL;
    int overridden = 0;
    for (int i = 0; i < n; i++) {
        memset(&st[i], 0, sizeof st[i]);
        nodes[i] = NULL;
        /* any number of entries (check.h: a descriptor deeper than any
         * rule matches none, unless it has an override); none only with an
         * override, which envoyproxy/ratelimit applies whatever the entries */
        int has_over = over != NULL && over[i].unit != SL_UNIT_NONE;
        if ((ndesc[i] < 1 && !(has_over && ndesc[i] == 0)) || descs[i] == NULL)
            return sl__check_err(err, errlen, SL_EINVAL, "descriptor %d has no entries", i + 1);
        if (has_over) {
            if (sl_rule_unit_ms(over[i].unit) == 0)
                return sl__check_err(err, errlen, SL_EINVAL,
                                     "descriptor %d: limit override with an unknown unit", i + 1);
            if (over[i].limit < 0 || over[i].limit > SL_MAX_LIMIT)
                return sl__check_err(err, errlen, SL_EINVAL,
                                     "descriptor %d: limit override must be 0 to %lld", i + 1,
                                     (long long)SL_MAX_LIMIT);
            overridden = 1;
            continue;
        }
        if (ndesc[i] > SL_RULES_MAX_DEPTH) continue; /* deeper than any rule: NO_RULE */
        nodes[i] = sl_rules_match(r, domain, dlen, descs[i], ndesc[i]);
        if (nodes[i] != NULL) plan->nmetric += nodes[i]->metric_dynamic;
    }
    if (overridden) dom = sl_rules_find_domain(r, domain, dlen);

    /* Collect the counted limits. */
    int nit = 0;
    int64_t pool_cost = 0; /* with costs: the largest of a non-shadow counter's */
    for (int i = 0; i < n; i++) {
        const sl_rule_node *node = nodes[i];
        int64_t ci = in->costs != NULL ? in->costs[i] : cost;
        if (over != NULL && over[i].unit != SL_UNIT_NONE) {
            if (dom == NULL) { /* a domain without rules: as envoyproxy/ratelimit */
                st[i].code = SL_CHECK_NO_RULE;
                continue;
            }
            if (ci > pool_cost) pool_cost = ci;
            int rc = add_override(plan, dom, i, descs[i], ndesc[i], &over[i], nit, count_denied, ci,
                                  err, errlen);
            if (rc < 0) return rc;
            nit++;
            continue;
        }
        if (node == NULL) {
            st[i].code = SL_CHECK_NO_RULE;
            continue;
        }
        int quota = node->quota_mode && !node->shadow_mode; /* shadow: never denies */
        int lease = node->concurrency > 0 && in->conc != SL_CHECK_CONC_RATES;
        if (lease && in->conc != SL_CHECK_CONC_LEASE) /* never left unenforced */
            return sl__check_err(err, errlen, SL_EINVAL,
                                 "descriptor %d: rule %s has concurrency: %lld, which only RL.CHECK "
                                 "and /v1/check take leases for: forward-auth and replay cannot "
                                 "hand a lease back (use RL.ACQUIRE beside it; docs/rules.md)",
                                 i + 1, node->path, (long long)node->concurrency);
        if (lease && quota)
            return sl__check_err(err, errlen, SL_EINVAL,
                                 "descriptor %d: rule %s has concurrency: %lld in quota_mode, "
                                 "which RL.CHECK does not take leases for (docs/rules.md)",
                                 i + 1, node->path, (long long)node->concurrency);
        if (!lease && node->nlimits == 0) { /* a concurrency limit alone, answered by rates */
            st[i].code = SL_CHECK_NO_RULE;
            continue;
        }
        st[i].shadow = node->shadow_mode != 0;
        st[i].node = node;
        st[i].code = SL_CHECK_UNLIMITED; /* unless a counted limit follows */
        if (lease) {
            int rc = add_lease(plan, i, node, descs[i], ndesc[i], ci > 0, err, errlen);
            if (rc < 0) return rc;
            st[i].code = SL_CHECK_OK; /* the lease's answer replaces it (sl_check_report) */
            st[i].rule = &plan->lim[plan->nleases - 1];
            st[i].name = st[i].rule->name;
        }
        if (node->nlimits > 0 && !lease) {
            st[i].rule = &node->limits[0];
            st[i].name = node->limits[0].name;
        }
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
                return sl__check_err(err, errlen, SL_EINVAL,
                            "more than %d limits in one request", SL_MAX_BATCH);
            sl_check_item *t = &it[nit];
            t->desc = i;
            t->rl = rl;
            t->p = rl->params;
            t->p.space = 1; /* rule counters: out of RL.ALLOW's reach (check.h) */
            if (rl->soft_pct > 0) t->p.limit = rl->soft_limit;
            t->keylen = 0;
            t->taglen = 0;
            t->shadow = st[i].shadow;
            t->quota = quota;
            t->zero = t->p.limit == 0;
            t->elastic =
                pool != NULL && rl->elastic_limit > 0 && !t->shadow && !t->quota && !t->zero;
            t->lyft = count_denied && t->p.algo == SL_FIXED_WINDOW && !t->elastic && !t->zero;
            t->cost = ci;
            t->lead = nit;
            if (!t->shadow && ci > pool_cost) pool_cost = ci;
            if (t->zero) {
                /* denied, never: no backend call */
                if (!t->shadow && !t->quota) plan->denied_never = 1;
            } else {
                int rc = sl_rules_key(node, descs[i], ndesc[i], j, t->key, sizeof t->key,
                                      &t->keylen);
                if (rc < 0)
                    return sl__check_err(err, errlen, rc, "descriptor %d, limit %s: %s", i + 1,
                                rl->name, sl_strerror(rc));
                t->taglen = tag_len(node->domain); /* "domain|...": the domain's bytes */
                /* the same counter earlier in the request: merge the costs */
                rc = merge(it, nit, ci, err, errlen);
                if (rc < 0) return rc;
            }
            nit++;
        }
        if (counted > 0 && quota) plan->nquota++;
        st[i].quota = counted > 0 && quota; /* not when unlimited or replaced */
        if (counted == 0 && first_replaced != NULL && !lease) {
            /* every counted limit replaced: applied as nothing, as Lyft does */
            st[i].code = SL_CHECK_OK;
            st[i].rule = first_replaced;
            st[i].name = first_replaced->name;
            st[i].replaced = 1;
        }
    }
    plan->nitems = nit;
    if (in->costs != NULL) plan->cost = pool_cost;
    return 0;
}

void sl_check_report(const sl_check_plan *plan, sl_check_outcome *o, sl_result *overall,
                     sl_check_status *st)
{
    const sl_check_item *it = plan->items;
    int nit = plan->nitems, n = plan->n;

    /* Zero limits answer "denied, never"; followers take their leader's answer. */
    for (int k = 0; k < nit; k++) {
        if (it[k].zero) {
            memset(&o->res[k], 0, sizeof o->res[k]);
            o->res[k].retry_after_ms = -1;
        } else if (it[k].lead != k) {
            o->res[k] = o->res[it[k].lead];
        }
    }

    /* Followers of a lease take their leader's answer (and hold no id). */
    for (int j = 0; j < plan->nleases; j++)
        if (plan->leases[j].lead != j) {
            o->lres[j] = o->lres[plan->leases[j].lead];
            o->lid[j] = 0;
        }

    /* Each descriptor's status: among its limits (items, then its lease),
     * the over one that holds the request longest, else the tightest. */
    for (int i = 0; i < n; i++) {
        st[i] = plan->pre[i];
        if (st[i].code == SL_CHECK_NO_RULE) continue;
        const sl_result *worst = NULL, *least = NULL, *over = NULL; /* as below */
        const sl_rule_limit *wl = NULL, *ll = NULL, *ol = NULL;     /* their limits */
        int wquota = 0;
        for (int k = 0; k < nit; k++) {
            if (it[k].desc != i) continue;
            const sl_result *r = &o->res[k];
            if (!r->allowed) { /* the over limit with the largest retry */
                if (worst == NULL || holds_longer(r, worst))
                    worst = r, wl = it[k].rl, wquota = it[k].quota;
            } else if (o->stretched[it[k].lead]) { /* passed above its L, on the pool */
                if (over == NULL || tighter(r, over)) over = r, ol = it[k].rl;
            } else if (least == NULL || tighter(r, least)) { /* the smallest remaining */
                least = r, ll = it[k].rl;
            }
        }
        for (int j = 0; j < plan->nleases; j++) {
            if (plan->leases[j].desc != i) continue;
            const sl_result *r = &o->lres[j];
            if (!r->allowed) {
                if (worst == NULL || holds_longer(r, worst)) worst = r, wl = &plan->lim[j], wquota = 0;
            } else if (least == NULL || tighter(r, least)) {
                least = r, ll = &plan->lim[j];
            }
        }
        if (worst != NULL) {
            sl_check_code code = SL_CHECK_OVER_LIMIT;
            if (st[i].shadow)
                code = SL_CHECK_SHADOW;
            else if (wquota && !o->quota_denied)
                code = SL_CHECK_OVER_QUOTA; /* the request did not fail for it */
            set_status(&st[i], code, wl, worst);
        } else if (over != NULL)
            set_status(&st[i], SL_CHECK_ELASTIC, ol, over);
        else if (least != NULL)
            set_status(&st[i], SL_CHECK_OK, ll, least);
        /* else: every limit unlimited (or replaced), status as matched, zeros */
    }

    /* The overall answer, from the enforced descriptors only. */
    int allowed = o->allowed;
    memset(overall, 0, sizeof *overall);
    const sl_check_status *pick = NULL;
    /* denied because every quota descriptor was over (and nothing else):
     * the first of them to have room again lets the request pass */
    int soonest = !allowed && o->quota_denied;
    for (int i = 0; i < n; i++) {
        const sl_check_status *c = &st[i];
        if (!allowed) {
            if (c->code == SL_CHECK_OVER_LIMIT &&
                (pick == NULL || (soonest ? frees_sooner(&c->result, &pick->result)
                                          : holds_longer(&c->result, &pick->result))))
                pick = c;
        } else if ((c->code == SL_CHECK_OK || c->code == SL_CHECK_ELASTIC) && !c->shadow &&
                   c->rule != NULL && c->limit > 0 &&
                   (pick == NULL || tighter(&c->result, &pick->result))) {
            pick = c;
        }
    }
    if (pick != NULL) *overall = pick->result;
    overall->allowed = allowed;
    overall->delay_ms = 0;
    if (allowed) {
        overall->retry_after_ms = 0;
        /* every enforced queue the request joined: it proceeds after the
         * longest (leaky-bucket's delay, SPEC §2), whichever limit the
         * other fields describe */
        for (int k = 0; k < nit; k++)
            if (!it[k].shadow && !it[k].zero && o->res[k].allowed &&
                o->res[k].delay_ms > overall->delay_ms)
                overall->delay_ms = o->res[k].delay_ms;
    }
}

int sl_check_status_tighter(const sl_check_status *a, const sl_check_status *b)
{
    int ao = a->code == SL_CHECK_OVER_LIMIT, bo = b->code == SL_CHECK_OVER_LIMIT;
    if (ao != bo) return ao;
    return ao ? holds_longer(&a->result, &b->result) : tighter(&a->result, &b->result);
}

void sl_check_count(const sl_check_plan *plan, const sl_check_outcome *o)
{
    for (int k = 0; k < plan->nitems; k++) {
        const sl_check_item *t = &plan->items[k];
        sl_rule_counts *c = t->rl->counts;
        if (c == NULL) continue;
        atomic_fetch_add_explicit(&c->checked, 1, memory_order_relaxed);
        if (!o->res[k].allowed)
            atomic_fetch_add_explicit(t->shadow ? &c->shadow : &c->over, 1, memory_order_relaxed);
        else if (o->stretched[t->lead])
            atomic_fetch_add_explicit(&c->elastic, 1, memory_order_relaxed);
    }
}
