/*
 * log.c -- one-line logfmt records on stderr (see log.h).
 *
 * Thread safety without a lock: each record is built in a stack buffer and
 * handed to the kernel with a single write(2) on fd 2, which the kernel
 * appends atomically for a pipe write of up to PIPE_BUF bytes and, in
 * practice, for any regular-file or terminal write of this size.  The level
 * is an atomic int, so it may change while other threads log.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

static _Atomic int log_level = SL_LOG_INFO;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void sl_log_set_level(int level)
{
    if (level < SL_LOG_DEBUG) level = SL_LOG_DEBUG;
    if (level > SL_LOG_ERROR) level = SL_LOG_ERROR;
    atomic_store_explicit(&log_level, level, memory_order_relaxed);
}

int sl_log_enabled(int level)
{
    return level >= atomic_load_explicit(&log_level, memory_order_relaxed);
}

int sl_log_level_parse(const char *s, size_t len, int *level)
{
    for (int i = SL_LOG_DEBUG; i <= SL_LOG_ERROR; i++) {
        if (strlen(level_names[i]) == len && strncasecmp(s, level_names[i], len) == 0) {
            *level = i;
            return 0;
        }
    }
    if (len == 7 && strncasecmp(s, "warning", 7) == 0) {
        *level = SL_LOG_WARN;
        return 0;
    }
    return -1;
}

const char *sl_log_level_name(int level)
{
    if (level < SL_LOG_DEBUG || level > SL_LOG_ERROR) return "?";
    return level_names[level];
}

/* Quotes s[0..) into dst (cap bytes, cap >= 8), always NUL-terminated. */
static void quote_into(char *dst, size_t cap, const char *s, int force)
{
    int plain = !force && s[0] != '\0';
    for (const unsigned char *p = (const unsigned char *)s; plain && *p; p++)
        if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f) plain = 0;
    if (plain) {
        size_t n = strlen(s);
        if (n < cap) {
            memcpy(dst, s, n + 1);
            return;
        }
    }
    size_t o = 0, lim = cap - 5; /* room for `..."` and NUL */
    dst[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[5];
        size_t n;
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\', esc[1] = (char)*p, n = 2;
        } else if (*p == '\n') {
            esc[0] = '\\', esc[1] = 'n', n = 2;
        } else if (*p == '\t') {
            esc[0] = '\\', esc[1] = 't', n = 2;
        } else if (*p < ' ' || *p == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", *p);
            n = 4;
        } else {
            esc[0] = (char)*p, n = 1;
        }
        if (o + n > lim) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(dst + o, esc, n);
        o += n;
    }
    dst[o++] = '"';
    dst[o] = '\0';
}

const char *sl_logq(const char *s)
{
    static _Thread_local char ring[8][512];
    static _Thread_local unsigned next;
    char *dst = ring[next++ % 8];
    quote_into(dst, sizeof ring[0], s ? s : "", 0);
    return dst;
}

void sl_log(int level, const char *msg, const char *fmt, ...)
{
    if (!sl_log_enabled(level)) return;
    int saved = errno;
    char line[SL_LOG_MAX_LINE];
    struct tm tm;
    int64_t now = sl__wall_ms();
    time_t secs = (time_t)(now / 1000);
    gmtime_r(&secs, &tm);
    size_t n = strftime(line, sizeof line, "ts=%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, sizeof line - n,
                          ".%03dZ level=%s msg=", (int)(now % 1000),
                          sl_log_level_name(level));
    quote_into(line + n, sizeof line - n < 512 ? sizeof line - n : 512, msg, 1);
    n += strlen(line + n);
    if (fmt != NULL && fmt[0] != '\0') {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(line + n, sizeof line - n, fmt, ap);
        va_end(ap);
        if (k < 0) k = 0;
        if ((size_t)k >= sizeof line - n) { /* cut: keep room for "...\n" */
            n = sizeof line - 5;
            memcpy(line + n, "...", 3);
            n += 3;
        } else {
            n += (size_t)k;
        }
    }
    line[n++] = '\n';
    ssize_t w;
    do {
        w = write(STDERR_FILENO, line, n);
    } while (w < 0 && errno == EINTR);
    errno = saved;
}
