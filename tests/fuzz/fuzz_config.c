/*
 * fuzz_config.c -- libFuzzer target for sluiced's file parsers: the config
 * file (sl_config_load_file, src/server/config.c), the users file and the
 * password file (sl_auth_new's --users-file and --requirepass-file,
 * src/server/auth.c).  Each input is written to a file (in /dev/shm when
 * there is one) and read through the real function, as sluiced reads it.
 *
 * Input: one byte of mode (its value mod 3), then the file's text.
 *   0, the config file, loaded onto the defaults:
 *     - refused: a message naming the file ("PATH:LINE: ..." or "cannot
 *       read ... 'PATH'"), and the config untouched (byte for byte);
 *     - accepted: parse(write(config)) == config -- every option the file
 *       may set, written back as `NAME "VALUE"` from --dump-options' value
 *       (what a flag would take), loads onto the defaults to the same
 *       --dump-options values (an option whose shown value is cut short,
 *       "...", is not written back nor compared).
 *   1, the users file:
 *     - refused: a message naming the file;
 *     - accepted: as many users as user lines, each logging in with its
 *       first >PASSWORD (if it has one) when on and refused when off, and
 *       refused with a password that is none of its >PASSWORDs (the first
 *       16 users).
 *   2, the password file: accepted exactly when it is one line of 1..4096
 *     bytes without NUL or CR (a final newline, and a CR before it, are
 *     dropped), and then "default" logs in with that line; refused with a
 *     message naming the file.
 * Besides: no crash, leak or sanitizer report (ASan, UBSan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_dir.h"
#include "auth.h"
#include "config.h"
#include "server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void die(const char *why)
{
    fprintf(stderr, "fuzz_config: %s\n", why);
    __builtin_trap();
}

/* The input and a second file, in fuzz_dir.h's directory. */
static const char path[] = "fuzz-input.conf", path2[] = "fuzz-again.conf";

static const int64_t now = 1000000000000; /* ms: the time of every login */

static void write_file(const char *p, const void *text, size_t n)
{
    FILE *f = fopen(p, "w");
    if (f == NULL || (n && fwrite(text, 1, n, f) != n) || fclose(f) != 0) die("temp file");
}

static void refusal_names_file(const char *err)
{
    if (err[0] == '\0') die("refused without a message");
    if (strstr(err, path) == NULL) die("a refusal's message does not name the file");
}

/* ---- the config file ---------------------------------------------------------------- */

#define MAXOPT 256

/* --dump-options of c: each option's name, whether a file may set it, and
 * its value (the sixth of seven tab-separated fields; the help, last, has
 * no tab). */
typedef struct dump {
    char *text;
    int n;
    char *name[MAXOPT], *value[MAXOPT];
    int in_file[MAXOPT];
} dump;

static void dump_of(const sl_config *c, dump *d)
{
    size_t len = 0;
    FILE *f = open_memstream(&d->text, &len);
    if (f == NULL) die("memory");
    sl_config_dump(f, c);
    if (fclose(f) != 0) die("memory");
    d->n = 0;
    char *save = NULL;
    for (char *ln = strtok_r(d->text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (ln[0] == '#') continue;
        if (d->n == MAXOPT) die("more options than MAXOPT");
        char *f1[5];
        char *p = ln;
        for (int k = 0; k < 5; k++) {
            f1[k] = p;
            p = strchr(p, '\t');
            if (p == NULL) die("a --dump-options line with fewer than 7 fields");
            *p++ = '\0';
        }
        char *help = strrchr(p, '\t');
        if (help == NULL) die("a --dump-options line with fewer than 7 fields");
        *help = '\0';
        d->name[d->n] = f1[0];
        d->in_file[d->n] = strcmp(f1[3], "yes") == 0;
        d->value[d->n] = p;
        d->n++;
    }
}

static int cut_short(const char *v)
{
    size_t n = strlen(v);
    return n >= 3 && strcmp(v + n - 3, "...") == 0;
}

static void config_file(const uint8_t *p, size_t n)
{
    write_file(path, p, n);
    sl_config c, before;
    sl_config_defaults(&c);
    before = c;
    char err[512] = "";
    if (sl_config_load_file(path, &c, err, sizeof err) != 0) {
        refusal_names_file(err);
        if (memcmp(&c, &before, sizeof c) != 0) die("a refused file changed the config");
        return;
    }
    dump d1, d2;
    dump_of(&c, &d1);
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (f == NULL) die("memory");
    for (int i = 0; i < d1.n; i++)
        if (d1.in_file[i] && d1.value[i][0] && !cut_short(d1.value[i]))
            fprintf(f, "%s \"%s\"\n", d1.name[i], d1.value[i]);
    if (fclose(f) != 0) die("memory");
    write_file(path2, text, tlen);
    sl_config c2;
    sl_config_defaults(&c2);
    if (sl_config_load_file(path2, &c2, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_config: written back:\n%s\nrefused: %s\n", text, err);
        die("the config written back is refused");
    }
    dump_of(&c2, &d2);
    if (d2.n != d1.n) die("another number of options");
    for (int i = 0; i < d1.n; i++) {
        if (!d1.in_file[i] || cut_short(d1.value[i])) continue;
        if (strcmp(d1.value[i], d2.value[i]) != 0) {
            fprintf(stderr, "fuzz_config: %s: '%s' read back as '%s'\n", d1.name[i], d1.value[i],
                    d2.value[i]);
            die("the config written back reads as another");
        }
    }
    free(text);
    free(d1.text);
    free(d2.text);
}

/* ---- the users and password files ---------------------------------------------------------- */

static int blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }

static int login(sl_auth *a, const char *user, size_t ulen, const char *pass, size_t plen,
                 const sl_auth_user **who)
{
    int64_t retry = 0;
    return sl_auth_login(a, "127.0.0.1", user, ulen, pass, plen, now, who, &retry);
}

static void users_file(const uint8_t *p, size_t n)
{
    write_file(path, p, n);
    sl_auth_opts o = {NULL, path, SL_AUTH_MAX_FAILS, 1000};
    char err[512] = "";
    sl_auth *a = sl_auth_new(&o, err, sizeof err);
    if (a == NULL) {
        refusal_names_file(err);
        return;
    }
    if (!sl_auth_required(a)) die("a users file accepted, yet no password required");
    /* the model: words of each line that is neither blank nor a comment */
    const char *s = (const char *)p, *end = s + n;
    int users = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        const char *w[64];
        size_t wl[64];
        int nw = 0;
        for (const char *q = s; q < le && nw < 64;) {
            while (q < le && blank(*q)) q++;
            if (q == le) break;
            w[nw] = q;
            while (q < le && !blank(*q)) q++;
            wl[nw] = (size_t)(q - w[nw]);
            nw++;
        }
        s = nl ? nl + 1 : end;
        if (nw == 0 || w[0][0] == '#') continue;
        users++;
        if (nw < 2) die("a user line without a name accepted");
        if (users > 16) continue;
        int off = 0;
        const char *pass = NULL, *pw[8];
        size_t plen = 0, pwl[8];
        int npw = 0;
        for (int k = 2; k < nw; k++) {
            if (wl[k] == 3 && memcmp(w[k], "off", 3) == 0) off = 1;
            if (w[k][0] == '>' && npw < 8) {
                pw[npw] = w[k] + 1, pwl[npw] = wl[k] - 1;
                if (npw++ == 0) pass = w[k] + 1, plen = wl[k] - 1;
            }
        }
        const sl_auth_user *who = NULL;
        if (pass != NULL) {
            int rc = login(a, w[1], wl[1], pass, plen, &who);
            if (off && rc != SL_AUTH_WRONG) die("a user marked off logged in");
            if (!off && rc != SL_AUTH_OK) die("a user did not log in with its own password");
            if (!off && (strlen(who->name) != wl[1] || memcmp(who->name, w[1], wl[1]) != 0))
                die("logged in as another user");
        }
        /* a password none of the user's: its first, or "x", with one more byte */
        char wrong[SL_AUTH_MAX_LINE + 2];
        size_t wn = pass ? plen : 1;
        memcpy(wrong, pass ? pass : "x", wn);
        wrong[wn++] = '!';
        int also_his = 0;
        for (int k = 0; k < npw; k++) also_his |= pwl[k] == wn && memcmp(pw[k], wrong, wn) == 0;
        if (!also_his && login(a, w[1], wl[1], wrong, wn, &who) != SL_AUTH_WRONG)
            die("a wrong password logged in");
    }
    if (sl_auth_nusers(a) != users) die("another number of users than user lines");
    sl_auth_free(a);
}

static void password_file(const uint8_t *p, size_t n)
{
    write_file(path, p, n);
    size_t k = n;
    if (k > 0 && p[k - 1] == '\n') k--;
    if (k > 0 && p[k - 1] == '\r') k--;
    int ok = k >= 1 && k <= SL_AUTH_MAX_LINE && memchr(p, '\n', k) == NULL &&
             memchr(p, '\r', k) == NULL && memchr(p, '\0', k) == NULL;
    sl_auth_opts o = {path, NULL, SL_AUTH_MAX_FAILS, 1000};
    char err[512] = "";
    sl_auth *a = sl_auth_new(&o, err, sizeof err);
    if (a == NULL) {
        if (ok) die("a good password file refused");
        refusal_names_file(err);
        return;
    }
    if (!ok) die("a bad password file accepted");
    const sl_auth_user *who = NULL;
    if (login(a, "default", 7, (const char *)p, k, &who) != SL_AUTH_OK)
        die("default did not log in with the file's password");
    sl_auth_free(a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    fuzz_dir_enter("config", path, path2);
    switch (data[0] % 3) {
    case 0: config_file(data + 1, size - 1); break;
    case 1: users_file(data + 1, size - 1); break;
    default: password_file(data + 1, size - 1); break;
    }
    return 0;
}
