/*
 * sluicectl.h -- the subcommands of `sluicectl` besides replay (replay.h):
 *
 *     check   load rules files as sluiced would, and say what they hold or
 *             what is wrong (check.c)
 *     top     a running sluiced's decisions, live, from its INFO (top.c)
 *
 * Each main takes argv from the subcommand's own name (argv[0] = "check")
 * and returns the exit status: 0 success, 1 the subject failed (a bad rules
 * file, a sluiced that cannot be reached or answers an error), 2 bad usage.
 */
#ifndef SL_CLI_SLUICECTL_H
#define SL_CLI_SLUICECTL_H

int sl__check_main(int argc, char **argv);
extern const char sl__check_usage[];

int sl__top_main(int argc, char **argv);
extern const char sl__top_usage[];

#endif
