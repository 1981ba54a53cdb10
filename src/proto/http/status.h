/*
 * status.h -- the status page's endpoints (status.c, docs/http.md "The
 * status page"), rows of http.c's route table.
 */
#ifndef SL_HTTP_STATUS_H
#define SL_HTTP_STATUS_H

#include "http_int.h"

/* Keys /v1/status lists, most denied first. */
#define SL_STATUS_TOP_KEYS 20

/* GET /v1/status: the JSON the page draws. */
sl_http_handler sl_http_status_json;

/* GET /: the page (status.html). */
sl_http_handler sl_http_status_page;

#endif
