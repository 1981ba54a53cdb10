/*
 * whatif.h -- `sluicectl replay --rules PATH --domain D`: what-if replay of a
 * rules file.  Every request of a trace (whatif_parse.h's formats) is
 * decided by sl_rules_check exactly as sluiced's RL.CHECK would decide it,
 * in input order, and answered with one line: SPEC section 6's six fields,
 * then each descriptor's code and rule name (docs/replay.md).
 *
 * replay.c hands its arguments over when sl__whatif_wanted says so; the
 * rest of `sluicectl replay` does not know this mode exists.
 */
#ifndef SL_WHATIF_H
#define SL_WHATIF_H

/* Whether `sluicectl replay` arguments (argv[0] "replay") ask for this mode:
 * an option --rules, --domain, --capacity or --log-format (alone or with
 * =VALUE) before any "--".  Reads argv only. */
int sl__whatif_wanted(int argc, char **argv);

/* `sluicectl replay --rules ...`: argv[0] is "replay".  Returns the exit
 * status: 0 done, 2 bad option, bad rules file or malformed input line, 1
 * other failure (out of memory, read or write error). */
int sl__whatif_main(int argc, char **argv);

/* The usage text of `sluicectl replay --rules`. */
extern const char sl__whatif_usage[];

#endif
