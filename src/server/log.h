/*
 * log.h -- sluiced's log: one-line structured records (logfmt) on stderr.
 *
 *     ts=2026-11-21T12:00:00.123Z level=info msg="listening" addr=127.0.0.1:6390 threads=2
 *
 * Every record is formatted into one buffer and written with one write(2),
 * so records from different threads never interleave.  A record longer than
 * SL_LOG_MAX_LINE bytes is cut short and ends in "...".
 *
 * Fields after msg are the caller's printf format: "key=value" pairs.  A
 * value that may hold spaces, quotes or '=' goes through sl_logq(), which
 * quotes and escapes it only when needed.
 */
#ifndef SL_LOG_H
#define SL_LOG_H

#include <stddef.h>

#define SL_LOG_DEBUG 0
#define SL_LOG_INFO  1
#define SL_LOG_WARN  2
#define SL_LOG_ERROR 3

#define SL_LOG_MAX_LINE 4096 /* bytes of one record, newline included */

/* Records below `level` are dropped.  Default SL_LOG_INFO.  Thread-safe. */
void sl_log_set_level(int level);
/* 1 if a record at `level` would be written (to skip costly arguments). */
int sl_log_enabled(int level);

/* Parses "debug", "info", "warn" (or "warning"), "error" of len bytes.
 * Returns 0 and sets *level, or -1. */
int sl_log_level_parse(const char *s, size_t len, int *level);
const char *sl_log_level_name(int level);

/* Writes one record: ts, level, msg (always quoted), then the fields made
 * from fmt (may be NULL or "").  Keeps errno. */
void sl_log(int level, const char *msg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Returns s ready to be a logfmt value: as is when it is non-empty and holds
 * no space, '"', '=', '\\' or control byte; otherwise in double quotes with
 * '"' and '\\' escaped and control bytes as \n, \t or \xHH.  The result
 * lives in a thread-local ring of 8 buffers of 512 bytes (longer values are
 * cut and end in "..."), so up to 8 may be used in one sl_log call. */
const char *sl_logq(const char *s);

#endif
