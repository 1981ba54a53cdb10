/*
 * model.h -- the reference model of sluice's decisions, for tests only.
 *
 * "Always tells the truth" (after rax's test model): per key it keeps the
 * full history of requests and answers every question by recomputing from
 * that history, straight from the definitions of SPEC sections 2-4 and the
 * team's choices written at the top of model.c.  Every reply field is found
 * by searching for the value its definition names (the largest cost that
 * would pass, the smallest wait after which ...), never by a closed formula,
 * so the model shares no arithmetic with src/lib.  It is slow on purpose:
 * O(history) per evaluation, O(history * 64) per decision.
 *
 * Not thread-safe.  Keys are compared bytewise; the model owns copies.
 */
#ifndef SL_TEST_MODEL_H
#define SL_TEST_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

typedef struct model model;

/* A model of one limit (algorithm + parameters) over any number of keys.
 * p must pass sl_params_check's rules (the model does not re-check them);
 * burst 0 and precision 0 take their defaults.  Aborts on out of memory. */
model *model_new(const sl_params *p);
void model_free(model *m);

/* Decides a request of `cost` for key at t and records it, as sl_decide. */
void model_decide(model *m, const void *key, size_t klen, int64_t t,
                  int64_t cost, sl_result *out);

/* The answer model_decide would give, changing nothing (as sl_peek). */
void model_peek(model *m, const void *key, size_t klen, int64_t t,
                int64_t cost, sl_result *out);

/* The time a request at t for key would be decided at: t, or the key's
 * latest time if that is later (SPEC section 4). */
int64_t model_effective_time(const model *m, const void *key, size_t klen,
                             int64_t t);

/* How many requests key's history holds (decide calls, not peeks). */
size_t model_history_len(const model *m, const void *key, size_t klen);

/* NULL, or a description of the first internal inconsistency the model
 * caught in itself (a search that did not converge, a predicate that was not
 * monotone, a replay that went negative): a bug in the model, not in the
 * library.  Stays set until model_free. */
const char *model_error(const model *m);

/* "fixed-window", ... ; "?" for anything else.  The model's own table, so
 * tests can name algorithms without the library. */
const char *model_algo_name(sl_algo a);

/* The capacity the `limit` field reports: L for the window algorithms, B
 * (default L) for the bucket algorithms. */
int64_t model_capacity(const sl_params *p);

#endif
