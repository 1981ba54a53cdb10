/*
 * vectors.h -- the spec's worked examples (the *.txt files of
 * $SLUICE_SPEC_DIR/vectors/) read for the tests that replay them (test_vectors, test_backend).
 *
 * A file's `# args:` line gives the parameters ("--algo X --limit N
 * --window W [--burst B] [--precision P] [--log-rejected]"); each line
 * `T KEY [COST] | ALLOWED LIMIT REMAINING RETRY_AFTER_MS RESET_AFTER_MS
 * DELAY_MS` is one request and its exact answer.  A malformed file fails
 * the running test (cmocka), naming file:line.
 */
#ifndef SL_TEST_VECTORS_H
#define SL_TEST_VECTORS_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

#define VEC_MAX_FILES 256
#define VEC_MAX_STEPS 1024 /* lines of one vector file */

typedef struct vec_step {
    int line;       /* in the vector file */
    char text[640]; /* the request part, for messages */
    int64_t t, cost;
    char key[SL_MAX_KEY + 1];
    size_t klen;
    int64_t want[6];
} vec_step;

typedef struct vec_file {
    char path[4400]; /* set by the caller before vec_load */
    char name[256];
    sl_params p;
    int nsteps;
    vec_step steps[VEC_MAX_STEPS];
} vec_file;

/* Loads v->path into *v; fails the test (naming file:line) if malformed. */
void vec_load(vec_file *v);

/* The vector files of vdir (*.txt, not hidden), sorted by name, each
 * strdup'd into names[0..VEC_MAX_FILES): how many (>= 1), or -1 with what
 * is wrong in why. */
int vec_names(const char *vdir, char **names, char *why, size_t whylen);

#endif
