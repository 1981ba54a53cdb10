/*
 * text.c -- text helpers of the `sluicectl` command (text.h).
 */
#include "text.h"

#include <errno.h>
#include <stdio.h>
#include <strings.h>
#include <unistd.h>

#include "sluice.h"

const char sl__digit_pairs[201] = "00010203040506070809"
                                  "10111213141516171819"
                                  "20212223242526272829"
                                  "30313233343536373839"
                                  "40414243444546474849"
                                  "50515253545556575859"
                                  "60616263646566676869"
                                  "70717273747576777879"
                                  "80818283848586878889"
                                  "90919293949596979899";

const char *sl__quote(const void *tok, size_t len, char *out)
{
    return sl__quote_n(tok, len, SL__QUOTE_MAX, out);
}

const char *sl__quote_n(const void *tok, size_t len, size_t max, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *t = tok;
    char *o = out;
    size_t n = len < max ? len : max;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = t[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            *o++ = (char)c;
        } else {
            *o++ = '\\';
            *o++ = 'x';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    if (n < len) {
        memcpy(o, "...", 3);
        o += 3;
    }
    *o = '\0';
    return out;
}

void sl__ctl_message(char *err, size_t errlen, unsigned char c, size_t col)
{
    if (c == 0)
        snprintf(err, errlen, "NUL byte at column %zu (binary data?)", col);
    else
        snprintf(err, errlen, "control byte 0x%02x at column %zu (binary data?)", c, col);
}

int sl__looks_numeric(const void *tok, size_t len)
{
    const unsigned char *t = tok;
    size_t i = (len > 0 && t[0] == '-') ? 1 : 0;
    if (i == len) return 0;
    for (; i < len; i++)
        if (t[i] < '0' || t[i] > '9') return 0;
    return 1;
}

int sl__write_all(int fd, const char *p, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = write(fd, p + off, n - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        off += (size_t)w;
    }
    return 0;
}

int sl__bool_parse(const char *s, size_t len, int *out)
{
    static const char *const words[] = {"no", "false", "off", "0", "yes", "true", "on", "1"};
    for (int i = 0; i < 8; i++) {
        if (strlen(words[i]) == len && strncasecmp(s, words[i], len) == 0) {
            *out = i >= 4;
            return 0;
        }
    }
    return -1;
}

int sl__args_next(sl__args *w, sl__opt *o, char *err, size_t errlen)
{
    if (w->i == 0) w->i = 1;
    while (w->i < w->argc) {
        const char *arg = w->argv[w->i++];
        if (w->only_files || arg[0] != '-' || strcmp(arg, "-") == 0) {
            if (w->many) {
                o->arg = arg;
                o->name = o->val = NULL;
                o->nlen = 0;
                return 3;
            }
            if (w->file != NULL) {
                snprintf(err, errlen, "only one FILE may be given ('%s', then '%s')", w->file,
                         arg);
                return -1;
            }
            w->file = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            w->only_files = 1;
            continue;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return 2;
        if (arg[1] != '-') {
            snprintf(err, errlen, "unknown option '%s' (see %s)", arg, w->see);
            return -1;
        }
        const char *eq = strchr(arg + 2, '=');
        o->arg = arg;
        o->name = arg + 2;
        o->nlen = eq ? (size_t)(eq - o->name) : strlen(o->name);
        o->val = NULL;
        if (w->flag != NULL && w->flag(o->name, o->nlen)) {
            int b; /* `--count-denied no`: a yes/no word after the flag is its value */
            if (eq)
                o->val = eq + 1;
            else if (w->i < w->argc &&
                     sl__bool_parse(w->argv[w->i], strlen(w->argv[w->i]), &b) == 0)
                o->val = w->argv[w->i++];
        } else if (w->takes(o->name, o->nlen)) {
            if (eq) {
                o->val = eq + 1;
            } else if (w->i < w->argc) {
                o->val = w->argv[w->i++];
            } else {
                snprintf(err, errlen, "option '%s' needs a value", arg);
                return -1;
            }
        } else if (eq) {
            snprintf(err, errlen, "option '%s' takes no value (or is unknown)", arg);
            return -1;
        }
        return 1;
    }
    return 0;
}
