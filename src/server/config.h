/*
 * config.h -- sluiced's settings: defaults, command-line flags and the
 * config file (docs/sluiced.md lists every option).
 *
 * Every flag `--name value` has a config-file twin `name value`.  The file
 * is read first and flags override it.  Parsing never half-applies: it
 * works on a copy and writes the caller's sl_config only when everything
 * parsed.  Errors name where (`--port`, or `file:line`) and quote the
 * offending token, e.g. "sluiced.conf:3: unknown option 'prot'".
 */
#ifndef SL_CONFIG_H
#define SL_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "server.h"

#define SL_CONFIG_MAX_BINDS   8 /* = the size of sl_config.binds */
#define SL_CONFIG_MAX_THREADS 256
#define SL_CONFIG_MAX_CLIENTS 1000000
#define SL_CONFIG_MAX_LINE    4096 /* bytes of one config-file line */
/* --max-output-total when not given: a quarter of --max-memory, at least
 * the first; the second when --max-memory is 0 (no bound). */
#define SL_CONFIG_OUTPUT_TOTAL_MIN       (16ULL << 20)
#define SL_CONFIG_OUTPUT_TOTAL_UNBOUNDED (256ULL << 20)

/* Return codes of sl_config_parse_args besides 0 and -1. */
#define SL_CONFIG_HELP    1 /* --help given: print sl_config_usage, exit 0 */
#define SL_CONFIG_VERSION 2 /* --version given */
#define SL_CONFIG_DUMP    3 /* --dump-options given, cfg set: print sl_config_dump, exit 0 */

/* Fills cfg with the defaults (127.0.0.1:6390, one thread per core, ...). */
void sl_config_defaults(sl_config *cfg);

/* Applies argv[1..argc) to cfg: first the file named by --config (if any),
 * then every flag in order.  Returns 0, SL_CONFIG_HELP or SL_CONFIG_VERSION
 * (at the first --help or --version, cfg untouched), SL_CONFIG_DUMP (cfg
 * set as with 0), or -1 with a message in err (errlen bytes,
 * NUL-terminated) and cfg untouched. */
int sl_config_parse_args(int argc, char **argv, sl_config *cfg, char *err, size_t errlen);

/* Applies the config file at path to cfg.  Returns 0, or -1 with a message
 * ("path:line: ...", or why the file cannot be read) and cfg untouched. */
int sl_config_load_file(const char *path, sl_config *cfg, char *err, size_t errlen);

/* The budget of unsent replies of all clients: --max-output-total, or
 * when not given, derived from --max-memory (SL_CONFIG_OUTPUT_TOTAL_*). */
uint64_t sl_config_output_total(const sl_config *cfg);

/* Writes the --help text, made from the option table (config.c). */
void sl_config_usage(FILE *f);

/* Writes --dump-options: a '#' header line, then one line per option in
 * --help's order, seven fields separated by tabs: name (the flag without
 * "--", the config-file key), short flag ("-h" or empty), the value's name
 * ("N", "BYTES", "yes|no"; empty for an option that takes none), whether
 * the config file takes it ("yes"/"no"), the default as --help writes it,
 * its value in cfg (as a flag would take it; empty: none), and its help.
 * tests/test_options.sh checks docs/sluiced.md against it, and the
 * Makefile makes sluiced(8)'s OPTIONS from it. */
void sl_config_dump(FILE *f, const sl_config *cfg);

#endif
