/*
 * params.c -- names, error strings, and the checking and parsing of the
 * parameters of a limit (SPEC sections 1 and 5).  Pure functions: no state.
 */
#include <string.h>

#include "sluice.h"

static const char *const algo_names[SL_ALGO_COUNT] = {
    "fixed-window", "sliding-log", "sliding-window", "sliding-buckets",
    "token-bucket", "gcra",        "leaky-bucket",
};

const char *sl_algo_name(sl_algo a)
{
    return (unsigned)a < SL_ALGO_COUNT ? algo_names[a] : "unknown";
}

int sl_algo_parse(const char *name, size_t len, sl_algo *out)
{
    for (int i = 0; i < SL_ALGO_COUNT; i++) {
        if (strlen(algo_names[i]) == len && memcmp(algo_names[i], name, len) == 0) {
            *out = (sl_algo)i;
            return 0;
        }
    }
    return SL_EALGO;
}

_Static_assert(SL_STORE_REC_SHARE == 64, "sl_strerror(SL_ETOOBIG) quotes the share");

const char *sl_strerror(int err)
{
    switch (err) {
    case SL_OK: return "ok";
    case SL_ENOMEM: return "out of memory";
    case SL_EALGO:
        return "unknown algorithm (expected fixed-window, sliding-log, sliding-window, "
               "sliding-buckets, token-bucket, gcra or leaky-bucket)";
    case SL_ELIMIT: return "limit must be an integer between 1 and 1000000000000";
    case SL_EWINDOW:
        return "window must be a duration between 1ms and 10 years "
               "(an integer of ms, or with a unit: ms, s, m, h, d, w, y)";
    case SL_EBURST:
        return "burst must be an integer between 1 and 1000000000000, "
               "and applies only to token-bucket, gcra and leaky-bucket";
    case SL_ECOST: return "cost must be an integer between 0 and 1000000000000";
    case SL_EPRECISION:
        return "precision must be an integer between 1 and 65535 that divides the window, "
               "and applies only to sliding-buckets";
    case SL_EKEY: return "key must be 1 to 512 bytes";
    case SL_ETIME: return "time must be an integer of milliseconds with absolute value below 2^62";
    case SL_ELOGREJECTED: return "log-rejected applies only to sliding-log";
    case SL_EINVAL: return "invalid argument";
    case SL_EFULL:
        return "store full: every key it could drop to make room still holds a limit, "
               "so new keys are refused";
    case SL_ETOOBIG:
        return "one key under these parameters could take more than 1/64 of the memory "
               "bound: lower the precision or the limit, or raise the bound";
    default: return "unknown error";
    }
}

static int is_bucket(sl_algo a)
{
    return a == SL_TOKEN_BUCKET || a == SL_GCRA || a == SL_LEAKY_BUCKET;
}

int sl_params_check(const sl_params *p)
{
    if (p == NULL) return SL_EINVAL;
    if ((unsigned)p->algo >= SL_ALGO_COUNT) return SL_EALGO;
    if (p->limit < 1 || p->limit > SL_MAX_LIMIT) return SL_ELIMIT;
    if (p->window_ms < 1 || p->window_ms > SL_MAX_WINDOW_MS) return SL_EWINDOW;
    if (p->burst != 0 && (!is_bucket(p->algo) || p->burst < 1 || p->burst > SL_MAX_LIMIT))
        return SL_EBURST;
    if (p->precision != 0) {
        if (p->algo != SL_SLIDING_BUCKETS || p->precision < 1 || p->precision > SL_MAX_PRECISION)
            return SL_EPRECISION;
    }
    if (p->algo == SL_SLIDING_BUCKETS) {
        int64_t prec = p->precision ? p->precision : SL_DEFAULT_PRECISION;
        if (p->window_ms % prec != 0) return SL_EPRECISION;
    }
    if (p->log_rejected && p->algo != SL_SLIDING_LOG) return SL_ELOGREJECTED;
    if (p->space != 0 && p->space != 1) return SL_EINVAL;
    return SL_OK;
}

/* sl_int_parse and sl_duration_parse each have a fast path for what
 * requests carry (a few digits, maybe one unit) that gives exactly the full
 * parser's value and error, and leave the rest to the full parser, which
 * is the reference the fast path is tested against (tests/test_params.c). */

int sl__int_parse_full(const char *s, size_t len, int64_t max, int64_t *out)
{
    if (len == 0 || len > 19) return SL_EINVAL;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9) return SL_EINVAL;
        /* the first test keeps v * 10 from overflowing; the second is the
         * bound (the first alone lets a digit past a max below 9 through:
         * (1 - 2) / 10 is 0) */
        if (v > (max - (int64_t)d) / 10 || v * 10 + (int64_t)d > max) return SL_EINVAL;
        v = v * 10 + (int64_t)d;
    }
    *out = v;
    return 0;
}

/* Fast path: up to 18 digits cannot overflow (< 10^18), and a value's
 * prefixes are never above it, so "the value is at most max" is the full
 * parser's every-prefix test. */
int sl_int_parse(const char *s, size_t len, int64_t max, int64_t *out)
{
    if (len == 0 || len > 18) return sl__int_parse_full(s, len, max, out);
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9) return SL_EINVAL;
        v = v * 10 + (int64_t)d;
    }
    if (v > max) return SL_EINVAL;
    *out = v;
    return 0;
}

int sl__duration_parse_full(const char *s, size_t len, int64_t *ms)
{
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {
        {"ms", 1},        {"s", 1000},          {"m", 60000},          {"h", 3600000},
        {"d", 86400000}, {"w", 604800000},     {"y", 31557600000LL},
    };
    size_t n = 0;
    while (n < len && s[n] >= '0' && s[n] <= '9') n++;
    int64_t v, mult = 0;
    if (n == 0 || sl__int_parse_full(s, n, SL_MAX_WINDOW_MS, &v) != 0) return SL_EWINDOW;
    if (n == len) {
        mult = 1;
    } else {
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            if (strlen(units[i].unit) == len - n && memcmp(units[i].unit, s + n, len - n) == 0)
                mult = units[i].ms;
        }
    }
    if (mult == 0 || v < 1 || v > SL_MAX_WINDOW_MS / mult) return SL_EWINDOW;
    *ms = v * mult;
    return 0;
}

/* Fast path: 1 to 18 digits (no overflow) and nothing, one unit letter or
 * "ms" after them -- the full parser's units, case and all; every failure
 * is SL_EWINDOW there too.  More digits: the full parser. */
int sl_duration_parse(const char *s, size_t len, int64_t *ms)
{
    size_t n = 0, lim = len < 18 ? len : 18;
    int64_t v = 0, mult = 0;
    unsigned d;
    while (n < lim && (d = (unsigned)(unsigned char)s[n] - '0') <= 9) {
        v = v * 10 + (int64_t)d;
        n++;
    }
    if (n == 18 && len > 18 && (unsigned)(unsigned char)s[18] - '0' <= 9)
        return sl__duration_parse_full(s, len, ms);
    if (n == len) {
        mult = 1;
    } else if (len - n == 1) {
        switch (s[n]) {
        case 's': mult = 1000; break;
        case 'm': mult = 60000; break;
        case 'h': mult = 3600000; break;
        case 'd': mult = 86400000; break;
        case 'w': mult = 604800000; break;
        case 'y': mult = 31557600000LL; break;
        default: break;
        }
    } else if (len - n == 2 && s[n] == 'm' && s[n + 1] == 's') {
        mult = 1;
    }
    if (n == 0 || mult == 0 || v < 1 || v > SL_MAX_WINDOW_MS / mult) return SL_EWINDOW;
    *ms = v * mult;
    return 0;
}
