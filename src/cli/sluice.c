/*
 * sluice.c -- the `sluice` command: dispatches to its subcommands.
 *
 *     sluice replay ...    decide a recorded trace (replay.c; with --rules,
 *                          what-if replay of a rules file: whatif.c)
 *     sluice --help | --version
 *
 * Exit status: 0 success, 2 usage or input error, 1 other failure.
 */
#include <stdio.h>
#include <string.h>

#include "replay.h"
#include "sluice.h"

static const char usage[] =
    "usage: sluice COMMAND [ARGS...]\n"
    "\n"
    "sluice is an exact rate limiter.  Commands:\n"
    "  replay     decide every request of a recorded trace with a candidate limit\n"
    "             or rules file (sluice replay --help)\n"
    "\n"
    "Options:\n"
    "  -h, --help     print this text\n"
    "  -V, --version  print the version\n";

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage, stdout);
        return 0;
    }
    if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
        printf("sluice %s\n", SL_VERSION);
        return 0;
    }
    if (strcmp(cmd, "replay") == 0) return sl__replay_main(argc - 1, argv + 1);
    fprintf(stderr, "sluice: unknown command '%s' (see sluice --help)\n", cmd);
    return 2;
}
