/*
 * metrics.h -- GET /metrics (the Prometheus text exposition format 0.0.4)
 * and GET /readyz, from the numbers INFO reads (src/server/stats.h, the
 * backend's, the rules'): docs/http.md, "Metrics and health", lists every
 * metric.  The page is written whole into memory, on the worker that got
 * the request; its size is bounded by the caps below.
 */
#ifndef SL_HTTP_METRICS_H
#define SL_HTTP_METRICS_H

#include <stddef.h>

#include <event2/buffer.h>

#include "http_int.h"
#include "rules.h"
#include "server.h"

/* Rules (distinct statistics entries of the serving set's limits) shown on
 * one page; past it, sluice_metrics_omitted{what="rules"} says how many
 * were left out.  5 series each (about 470 bytes). */
#define SL_METRICS_MAX_RULES 10000
/* Per-value names (stats.h) shown on one page, all rules together; past
 * it, sluice_metrics_omitted{what="values"}.  4 series each (about 260
 * bytes).  With both caps reached the page is about 7.3 MB, written in
 * some 40 ms (tests/test_http_ready.c prints both). */
#define SL_METRICS_MAX_VALUES 10000

#define SL_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* Appends the metrics page of srv to b, with the per-rule series of the
 * serving set r (NULL: none loaded).  Returns 0, or -1 when out of memory
 * (b then holds part of a page: do not send it). */
int sl_metrics_write(struct evbuffer *b, sl_srv *srv, const sl_rules *r);

/* Appends s (n bytes) to b as a label value of the exposition format:
 * backslash, double quote and newline escaped (\\, \", \n); other bytes as
 * they are.  Returns 0 or -1 (no memory). */
int sl_metrics_label(struct evbuffer *b, const char *s, size_t n);

/* Whether srv is ready to decide: 1, or 0 with the reason in why (a
 * sentence, NUL-terminated).  Ready means: when the server has a rules
 * path, a set is serving (r non-NULL); and the backend reports no error
 * of its own (backend.h's err / errstr). */
int sl_http_ready(const sl_srv *srv, const sl_rules *r, char *why, size_t whylen);

/* The endpoints (rows of http.c's routes[]). */
sl_http_handler sl_http_metrics, sl_http_readyz;

#endif
