/*
 * fuzz_resp.c -- libFuzzer target for the RESP parser.  Feeds arbitrary
 * bytes, parses every command in them, and checks the parser's promises
 * (src/server/resp.h), aborting on any broken one so libFuzzer keeps the
 * input:
 *   - progress on every OK, and arguments inside the command's bytes;
 *   - an error message on every error;
 *   - the same answer for the same bytes (rc, used, argc, every argument);
 *   - a strict prefix of a complete command is incomplete: for every
 *     k < used, buf[0..k) answers SL_RESP_AGAIN -- never OK (a shorter
 *     command), never ERROR (a client whose command arrives split would be
 *     cut off).  All k for commands up to PREFIX_ALL bytes, PREFIX_SAMPLE
 *     of them (the ends and evenly spread ones) beyond.
 * The property holds for command lines up to SL_RESP_MAX_INLINE bytes;
 * libFuzzer's inputs here (-max_len=8192) stay below it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"

#define MAX_BULK 4096
#define PREFIX_ALL 512   /* check every prefix of a command up to this size */
#define PREFIX_SAMPLE 64 /* else this many prefixes */

static sl_resp_cmd cmd, cmd2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* buf[0..k), a strict prefix of a complete command, must be incomplete. */
static void check_prefix(const char *buf, size_t k)
{
    size_t u = 0;
    const char *e = NULL;
    if (sl_resp_parse(buf, k, MAX_BULK, &cmd2, &u, &e) != SL_RESP_AGAIN) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    size_t off = 0;
    while (off < size) {
        const char *p0 = buf + off;
        size_t len = size - off, used = 0;
        const char *err = NULL;
        int rc = sl_resp_parse(p0, len, MAX_BULK, &cmd, &used, &err);

        /* deterministic: the same bytes, the same answer */
        size_t used2 = 0;
        const char *err2 = NULL;
        int rc2 = sl_resp_parse(p0, len, MAX_BULK, &cmd2, &used2, &err2);
        if (rc2 != rc) __builtin_trap();
        if (rc == SL_RESP_ERROR) {
            if (err == NULL || err2 == NULL || strcmp(err, err2) != 0) __builtin_trap();
            break;
        }
        if (rc == SL_RESP_AGAIN) break;
        if (rc != SL_RESP_OK) __builtin_trap();
        if (used2 != used || cmd2.argc != cmd.argc) __builtin_trap();
        if (used == 0 || used > len) __builtin_trap();
        if (cmd.argc < 0 || cmd.argc > SL_RESP_MAX_ARGS) __builtin_trap();
        for (int i = 0; i < cmd.argc; i++) {
            const char *p = cmd.argv[i].p;
            if (p < p0 || p + cmd.argv[i].len > p0 + used) __builtin_trap();
            if (cmd2.argv[i].p != p || cmd2.argv[i].len != cmd.argv[i].len) __builtin_trap();
        }

        /* every strict prefix of the command is incomplete */
        if (used <= PREFIX_ALL) {
            for (size_t k = 0; k < used; k++) check_prefix(p0, k);
        } else {
            for (size_t j = 0; j < PREFIX_SAMPLE; j++) /* evenly spread, 0 included */
                check_prefix(p0, j * (used - 1) / PREFIX_SAMPLE);
            for (size_t k = used - 3; k < used; k++) /* the final CRLF's neighbourhood */
                check_prefix(p0, k);
            check_prefix(p0, 1);
        }
        off += used;
    }
    return 0;
}
