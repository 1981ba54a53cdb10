/*
 * run.c -- what the two modes of `sluicectl replay` share (run.h).
 */
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "util.h"

int sl__usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("sluicectl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

int sl__opts_next(sl__args *w, sl__opt *o, const char *usage)
{
    char err[512];
    int rc = sl__args_next(w, o, err, sizeof err);
    if (rc < 0) return sl__usage_error("%s", err);
    if (rc == 2) {
        fputs(usage, stdout);
        return -1;
    }
    return rc;
}

int sl__name_in(const char *name, size_t nlen, const char *const *list, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (strlen(list[k]) == nlen && memcmp(list[k], name, nlen) == 0) return 1;
    return 0;
}

int sl__opt_max_memory(const char *v, size_t *out)
{
    uint64_t x;
    if (sl__size_parse(v, strlen(v), &x) != 0 || x > SL__MAX_MEMORY)
        return sl__usage_error("--max-memory must be a number of bytes up to 2^50, with an "
                               "optional suffix k, m or g (k = 1024), got '%s'",
                               v);
    *out = (size_t)x;
    return 0;
}

int sl__input_open(const char *file, const char **name)
{
    *name = "standard input";
    if (file == NULL || strcmp(file, "-") == 0) return 0;
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "sluicectl: cannot open '%s': %s\n", file, strerror(errno));
        return -1;
    }
    *name = file;
    return fd;
}

ssize_t sl__read(int fd, void *buf, size_t n)
{
    ssize_t r;
    do {
        r = read(fd, buf, n);
    } while (r < 0 && errno == EINTR);
    return r;
}

int sl__store_failed(int err, size_t max_memory)
{
    fprintf(stderr, "sluicectl: %s%s\n", sl_strerror(err),
            max_memory && err == SL_ENOMEM ? " (is --max-memory too small?)" : "");
    return err == SL_ENOMEM ? 1 : 2;
}

void sl__warn_evicted(uint64_t n, const char *what)
{
    if (n == 0) return;
    fprintf(stderr,
            "sluicectl: warning: %llu %s were evicted to stay under --max-memory; their later "
            "requests were decided on fresh state\n",
            (unsigned long long)n, what);
}

int sl__out_flush(sl__out *o)
{
    if (o->failed) return -1;
    if (o->before != NULL) o->before(o->ctx);
    int e = sl__write_all(o->fd, o->buf, o->len);
    o->len = 0;
    if (e != 0) {
        o->failed = e;
        return -1;
    }
    return 0;
}

void sl__pct(char *out, size_t n, uint64_t part, uint64_t whole)
{
    uint64_t permille = whole ? (part * 1000 + whole / 2) / whole : 0;
    snprintf(out, n, "%llu.%llu%%", (unsigned long long)(permille / 10),
             (unsigned long long)(permille % 10));
}

void sl__print_totals(FILE *f, int width, uint64_t requests, uint64_t allowed, uint64_t lines)
{
    char a[32], d[32];
    sl__pct(a, sizeof a, allowed, requests);
    sl__pct(d, sizeof d, requests - allowed, requests);
    fprintf(f, "  %-*s%12llu   (%llu lines read)\n", width, "requests",
            (unsigned long long)requests, (unsigned long long)lines);
    fprintf(f, "  %-*s%12llu   %s\n", width, "allowed", (unsigned long long)allowed, a);
    fprintf(f, "  %-*s%12llu   %s\n", width, "denied", (unsigned long long)(requests - allowed), d);
}

size_t sl__top_insert(const void **top, size_t ntop, size_t max, const void *item,
                      int (*better)(const void *a, const void *b, const void *ctx), const void *ctx)
{
    if (ntop == max && !better(item, top[ntop - 1], ctx)) return ntop;
    size_t j = ntop < max ? ntop++ : max - 1;
    while (j > 0 && better(item, top[j - 1], ctx)) {
        top[j] = top[j - 1];
        j--;
    }
    top[j] = item;
    return ntop;
}
