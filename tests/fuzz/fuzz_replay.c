/*
 * fuzz_replay.c -- libFuzzer target for `sluicectl replay`'s line parser
 * (sl__replay_parse_line, src/cli/replay.c), a function over bytes.
 *
 * Input: one line (the parser is given exactly its bytes, in a buffer of
 * that size, so a read past them is an ASan report).  Checked besides no
 * crash or sanitizer report:
 *   - the answer is one of SL_REPLAY_REQ, SKIP, BAD;
 *   - BAD comes with a non-empty NUL-terminated message within errlen;
 *   - SKIP only for a line that is blank or whose first non-blank byte is
 *     '#' (blanks: spaces and tabs, and the one '\r' a line may end with);
 *   - a REQ keeps replay.h's contract: the key lies inside the line, is
 *     1..SL_MAX_KEY bytes without space, tab or control byte, |T| <
 *     SL_MAX_TIME_MS, COST in 0..SL_MAX_LIMIT;
 *   - and round-trips: the request written back as "T KEY COST" parses to
 *     the same T, KEY and COST.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"
#include "sluice.h"
#include "whatif.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* replay.c's command hands `--rules` runs to whatif.c, which would bring the
 * rules and the backends into the link; the line parser needs neither, and
 * nothing here runs the command. */
int sl__whatif_wanted(int argc, char **argv)
{
    (void)argc, (void)argv;
    __builtin_trap();
}
int sl__whatif_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    __builtin_trap();
}

static void die(const char *why)
{
    fprintf(stderr, "fuzz_replay: %s\n", why);
    __builtin_trap();
}

#define ERRLEN 160

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *line = malloc(size ? size : 1); /* exactly the line's bytes */
    if (line == NULL) die("memory");
    if (size) memcpy(line, data, size);
    sl__replay_req rq;
    char err[ERRLEN + 8];
    memset(err, 'x', sizeof err);
    int rc = sl__replay_parse_line(line, size, &rq, err, ERRLEN);

    size_t i = 0, end = size;
    if (end > 0 && line[end - 1] == '\r') end--;
    while (i < end && (line[i] == ' ' || line[i] == '\t')) i++;
    int blank_or_comment = size <= SL_REPLAY_MAX_LINE && (i == end || line[i] == '#');

    if (rc == SL_REPLAY_BAD) {
        if (memchr(err, '\0', ERRLEN) == NULL) die("refusal's message not terminated within errlen");
        if (err[0] == '\0') die("a line refused without a message");
    } else if (rc == SL_REPLAY_SKIP) {
        if (!blank_or_comment) die("skipped a line that is neither blank nor a comment");
    } else if (rc == SL_REPLAY_REQ) {
        if (blank_or_comment) die("a blank line or a comment taken as a request");
        if (rq.key < line || rq.key + rq.klen > line + size) die("key outside the line");
        if (rq.klen < 1 || rq.klen > SL_MAX_KEY) die("key length out of range");
        for (size_t k = 0; k < rq.klen; k++) {
            unsigned char ch = (unsigned char)rq.key[k];
            if (ch == ' ' || ch == '\t' || ch < 0x20 || ch == 0x7f) die("blank or control in key");
        }
        if (rq.t <= -SL_MAX_TIME_MS || rq.t >= SL_MAX_TIME_MS) die("time out of range");
        if (rq.cost < 0 || rq.cost > SL_MAX_LIMIT) die("cost out of range");

        /* parse(write(x)) == x */
        char again[SL_MAX_KEY + 64];
        int n = snprintf(again, sizeof again, "%lld ", (long long)rq.t);
        memcpy(again + n, rq.key, rq.klen);
        n += (int)rq.klen;
        n += snprintf(again + n, sizeof again - (size_t)n, " %lld", (long long)rq.cost);
        sl__replay_req r2;
        char err2[ERRLEN];
        if (sl__replay_parse_line(again, (size_t)n, &r2, err2, sizeof err2) != SL_REPLAY_REQ)
            die("a request written back is not read as one");
        if (r2.t != rq.t || r2.cost != rq.cost || r2.klen != rq.klen ||
            memcmp(r2.key, rq.key, rq.klen) != 0)
            die("a request written back reads as another");
    } else {
        die("an answer that is not REQ, SKIP or BAD");
    }
    free(line);
    return 0;
}
