/*
 * fuzz_dir.h -- for the fuzz targets that hand their input to a parser as
 * a file (the config, users and password files; a snapshot): a private
 * working directory, in /dev/shm when there is one, holding files of fixed
 * names.  Fixed, not random: a random name in a refusal's message would
 * reach libFuzzer's table of compared strings and make one seeded run
 * differ from the next.  Header-only; a target includes it once.
 */
#ifndef SL_FUZZ_DIR_H
#define SL_FUZZ_DIR_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char fuzz_dir[64];
static const char *fuzz_dir_files[2];

static void fuzz_dir_cleanup(void)
{
    for (int i = 0; i < 2; i++)
        if (fuzz_dir_files[i] != NULL) unlink(fuzz_dir_files[i]);
    if (chdir("/") == 0) rmdir(fuzz_dir);
}

/* Makes the directory "<base>/fuzz-NAME-XXXXXX" at the first call and works
 * in it from then on; the files named a and b (relative names) are removed
 * with it at exit.  Aborts if it cannot: no input could be fed. */
static void fuzz_dir_enter(const char *name, const char *a, const char *b)
{
    if (fuzz_dir[0]) return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/fuzz-%s-XXXXXX", base, name);
    if (mkdtemp(fuzz_dir) == NULL || chdir(fuzz_dir) != 0) {
        fprintf(stderr, "fuzz_%s: cannot make a working directory in %s\n", name, base);
        __builtin_trap();
    }
    fuzz_dir_files[0] = a, fuzz_dir_files[1] = b;
    atexit(fuzz_dir_cleanup);
}

#endif
