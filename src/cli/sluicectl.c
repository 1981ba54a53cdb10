/*
 * sluicectl.c -- the `sluicectl` command: dispatches to its subcommands.
 *
 *     sluicectl replay ...    decide a recorded trace (replay.c; with --rules,
 *                             what-if replay of a rules file: whatif.c)
 *     sluicectl check PATH... load rules files as sluiced would (check.c)
 *     sluicectl top ...       a running sluiced's decisions, live (top.c)
 *     sluicectl --help | --version
 *
 * The command was called `sluice` at first; Debian's package "sluice"
 * (a data-piping tool) installs /usr/bin/sluice and sluice(1), so it was
 * renamed.  The build tree keeps build/sluice, a link to this program, for
 * one release: called by that name it works as before and says once, on
 * standard error, what it is called now.
 *
 * Exit status: 0 success, 2 usage or input error, 1 other failure (check: a
 * file that does not load; top: a server that cannot be reached).
 */
#include <stdio.h>
#include <string.h>

#include "replay.h"
#include "sluicectl.h"
#include "sluice.h"

static const char usage[] =
    "usage: sluicectl COMMAND [ARGS...]\n"
    "\n"
    "sluicectl is sluice's command line tool; sluice is an exact rate limiter.\n"
    "Commands:\n"
    "  replay     decide every request of a recorded trace with a candidate limit\n"
    "             or rules file (sluicectl replay --help)\n"
    "  check      load rules files as sluiced would: OK per domain, or sluiced's\n"
    "             FILE:LINE:COLUMN message (sluicectl check --help)\n"
    "  top        a running sluiced's decisions per second, overall and per rule,\n"
    "             its clients and backend (sluicectl top --help)\n"
    "\n"
    "Options:\n"
    "  -h, --help     print this text\n"
    "  -V, --version  print the version\n"
    "\n"
    "Documentation: sluicectl(1), docs/replay.md, docs/operations.md\n";

/* The last component of path (argv[0]). */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

int main(int argc, char **argv)
{
    if (argc > 0 && strcmp(base_name(argv[0]), "sluice") == 0)
        fputs("sluice: note: this command is now called sluicectl; the name 'sluice' goes away in "
              "the next release\n",
              stderr);
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
        printf("sluicectl %s\n", SL_VERSION);
        return 0;
    }
    if (strcmp(cmd, "replay") == 0) return sl__replay_main(argc - 1, argv + 1);
    if (strcmp(cmd, "check") == 0) return sl__check_main(argc - 1, argv + 1);
    if (strcmp(cmd, "top") == 0) return sl__top_main(argc - 1, argv + 1);
    fprintf(stderr, "sluicectl: unknown command '%s' (see sluicectl --help)\n", cmd);
    return 2;
}
