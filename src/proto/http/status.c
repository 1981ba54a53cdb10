/*
 * status.c -- the live status page (docs/http.md, "The status page"):
 *
 *   GET /v1/status   JSON: uptime, the rules' version and last reload
 *                    error, per rule the decisions per second over the
 *                    history's ring, and the most-limited keys
 *                    (src/server/history.h);
 *   GET /            one self-contained HTML page (status.html, built
 *                    into the binary: nothing is read from disk) that
 *                    draws that JSON and fetches it again every second.
 *
 * Keys and rule names are hostile: the JSON carries them as JSON strings
 * (bytes that are not UTF-8 as \xNN, flagged), and the page writes them
 * only with textContent.  The page is also served with a
 * Content-Security-Policy that allows nothing from elsewhere.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "history.h"
#include "http_int.h"
#include "live.h"
#include "status.h"

/* The page, status.html, as bytes in the binary (the Makefile makes this
 * object depend on the file; the assembler's path is the source tree's,
 * where make runs). */
__asm__(".section .rodata\n"
        ".global sl_status_html\n"
        ".type sl_status_html, @object\n"
        ".balign 16\n"
        "sl_status_html:\n"
        ".incbin \"src/proto/http/status.html\"\n"
        ".global sl_status_html_end\n"
        "sl_status_html_end:\n"
        ".byte 0\n"
        ".previous\n");
extern const char sl_status_html[], sl_status_html_end[];

/* The page may load nothing but itself and its own JSON. */
#define PAGE_CSP                                                                                   \
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "                  \
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "                     \
    "frame-ancestors 'none'"

/* s (n bytes, any bytes) as a JSON string: itself when it is UTF-8,
 * otherwise with each byte of 0x80 and above written as \xNN and *binary
 * set.  NULL when out of memory. */
static json_t *bytes_string(const char *s, size_t n, int *binary)
{
    json_t *j = json_stringn(s, n);
    *binary = 0;
    if (j != NULL || n == 0) return j;
    char *b = malloc(n * 4 + 1);
    if (b == NULL) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80)
            b[k++] = (char)c;
        else
            k += (size_t)snprintf(b + k, 5, "\\x%02X", c);
    }
    j = json_stringn(b, k);
    free(b);
    *binary = 1;
    return j;
}

/* One series as JSON, oldest second first (history.h). */
static void add_series(const sl_history_series *sr, int64_t last, void *arg)
{
    static const char *const names[SL_HIST_NCOUNTS] = {"allowed", "denied", "shadow", "elastic"};
    json_t *list = arg, *o = json_object(), *a[SL_HIST_NCOUNTS];
    int binary;
    for (int c = 0; c < SL_HIST_NCOUNTS; c++) a[c] = json_array();
    for (int64_t t = last - SL_HISTORY_SECONDS + 1; t <= last; t++)
        for (int c = 0; c < SL_HIST_NCOUNTS; c++)
            json_array_append_new(a[c], json_integer(t < 0 ? 0 : sr->n[t % SL_HISTORY_SECONDS][c]));
    json_object_set_new(o, "rule", bytes_string(sr->rs->name, strlen(sr->rs->name), &binary));
    json_object_set_new(o, "total", json_integer((json_int_t)sr->total));
    for (int c = 0; c < SL_HIST_NCOUNTS; c++) json_object_set_new(o, names[c], a[c]);
    json_array_append_new(list, o);
}

static json_t *rules_json(sl_live *l)
{
    if (l == NULL) return json_null();
    sl_live_info li;
    sl_live_info_get(l, &li);
    int binary;
    return json_pack("{s:I,s:s,s:I,s:I,s:o,s:I}", "version", (json_int_t)li.version, "path",
                     sl_live_path(l), "reloads", (json_int_t)li.reloads, "failures",
                     (json_int_t)li.failures, "last_error",
                     li.last_error[0] ? bytes_string(li.last_error, strlen(li.last_error), &binary)
                                      : json_null(),
                     "last_error_ms", (json_int_t)li.last_error_ms);
}

static json_t *top_json(sl_history *h)
{
    json_t *list = json_array();
    sl_history_top *top = malloc(SL_STATUS_TOP_KEYS * sizeof *top);
    int n = top ? sl_history_top_keys(h, top, SL_STATUS_TOP_KEYS) : 0;
    for (int i = 0; i < n; i++) {
        int binary;
        json_t *k = bytes_string(top[i].key, top[i].len, &binary);
        json_array_append_new(list,
                              json_pack("{s:o,s:I,s:I,s:b,s:b}", "key", k, "denied",
                                        (json_int_t)top[i].count, "error", (json_int_t)top[i].err,
                                        "truncated", top[i].cut, "binary", binary));
    }
    free(top);
    return list;
}

void sl_http_status_json(http_worker *hw, const sl_hreq *req)
{
    sl_svc_ctx *x = hw->svc;
    sl_srv *srv = x->srv;
    int64_t now = sl_now_ms();
    json_t *series = json_array();
    int64_t last = -1;
    json_t *top = json_array();
    if (srv->history != NULL) {
        last = sl_history_foreach(srv->history, add_series, series);
        json_decref(top);
        top = top_json(srv->history);
    }
    json_t *o =
        json_pack("{s:I,s:I,s:o,s:{s:i,s:i,s:I,s:o},s:o}", "now_ms", (json_int_t)now, "uptime_s",
                  (json_int_t)((now - srv->start_ms) / 1000), "rules", rules_json(srv->live),
                  "history", "seconds", SL_HISTORY_SECONDS, "rules_max", SL_HISTORY_RULES, "end",
                  (json_int_t)last, "series", series, "top_keys", top);
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_hhdrs_add(&h, "Cache-Control", "no-store");
    sl_http_send_json_h(&req->a, &h, 200, "OK", o);
}

void sl_http_status_page(http_worker *hw, const sl_hreq *req)
{
    (void)hw;
    sl_hhdrs h;
    sl_hhdrs_init(&h);
    sl_hhdrs_add(&h, "Content-Security-Policy", PAGE_CSP);
    sl_hhdrs_add(&h, "X-Content-Type-Options", "nosniff");
    sl_hhdrs_add(&h, "Cache-Control", "no-store");
    sl_http_send(&req->a, 200, "OK", &h, "text/html; charset=utf-8", sl_status_html,
                 (size_t)(sl_status_html_end - sl_status_html));
}
