/*
 * auth.h -- who may talk to sluiced, and what they may do: users and their
 * passwords, command groups, and the limiter of failed logins.
 *
 * Users come from two files, read once at start (docs/sluiced.md,
 * "Authentication"): --requirepass-file (the password of the user
 * "default", who may do everything) and --users-file (one user a line, with
 * passwords in clear or as SHA-256, and the command groups the user may
 * run).  A bad file is refused as a whole, naming FILE:LINE and the reason.
 * Only SHA-256 digests of the passwords are kept in memory; an offered
 * password is hashed and compared with every digest of the user in
 * constant time (CRYPTO_memcmp), and a name that is no user is compared
 * against a dummy digest, so the time taken says neither how much of a
 * password was right nor whether the user exists.
 *
 * Failed logins are counted per client address (IPv6: per /64) by
 * libsluice itself: a sliding log of N failures per window in a small
 * store of its own.  Once an address has N failures in the window, its
 * AUTH attempts are refused without looking at the password until the
 * oldest failure leaves the window.  A success does not clear the count:
 * otherwise one low-privilege password would let its holder guess another
 * user's password at full speed.
 *
 * With no file given, authentication is off: every connection is the user
 * "default" with every group, as in Redis.
 *
 * Threads: sl_auth_new and sl_auth_free run on one thread (main); the rest
 * may be called from any thread at once (the users are immutable, the
 * counters atomic, the failure store locks inside libsluice).
 */
#ifndef SL_AUTH_H
#define SL_AUTH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SL_AUTH_DIGEST        32         /* bytes of a SHA-256 digest */
#define SL_AUTH_MAX_NAME      64         /* bytes of a user name */
#define SL_AUTH_MAX_PASSWORDS 4          /* passwords of one user (to rotate them) */
#define SL_AUTH_MAX_USERS     1024       /* users in a users file */
#define SL_AUTH_MAX_LINE      4096       /* bytes of one users-file line, and of a password file */
#define SL_AUTH_MAX_FAILS     1000       /* the largest N of --auth-fail-limit N/DUR */
#define SL_AUTH_FAIL_MEMORY   (8u << 20) /* bytes of the failure store; least recent go first */

/* Command groups: the bits a user holds, and a command requires. */
#define SL_AUTH_DECIDING 1u /* RL.ALLOW, RL.CHECK */
#define SL_AUTH_READING  2u /* RL.PEEK, INFO, RL.RULES (listing), COMMAND */
#define SL_AUTH_ADMIN    4u /* RL.RESET, RL.RULES RELOAD, and seeing file paths */
#define SL_AUTH_ALL      7u

/* One user.  Read-only once sl_auth_new has returned. */
typedef struct sl_auth_user {
    char name[SL_AUTH_MAX_NAME + 1];
    unsigned groups; /* SL_AUTH_* bits */
    int on;          /* 0: the user exists but cannot log in ("off") */
    int npass;       /* digests in pass[] */
    unsigned char pass[SL_AUTH_MAX_PASSWORDS][SL_AUTH_DIGEST];
    int line; /* where the users file defines it; 0: --requirepass-file or built in */
} sl_auth_user;

typedef struct sl_auth sl_auth;

typedef struct sl_auth_opts {
    const char *requirepass_file; /* NULL or "": none */
    const char *users_file;       /* NULL or "": none */
    int64_t fail_max;             /* N: failures per window and address, 1..SL_AUTH_MAX_FAILS */
    int64_t fail_window_ms;       /* the window, ms */
} sl_auth_opts;

/* Reads the files of o.  Returns the users, or NULL with a message in err
 * that names the file (and line) and the reason, e.g.
 * "users.conf:3: unknown group '+admn' (expected +deciding, +reading,
 * +admin or +all)".  Nothing of a bad file is kept. */
sl_auth *sl_auth_new(const sl_auth_opts *o, char *err, size_t errlen);
void sl_auth_free(sl_auth *a);

/* Whether a password is configured (a connection must then log in). */
int sl_auth_required(const sl_auth *a);
/* How many users there are (the built-in "default" of an open server
 * counts). */
int sl_auth_nusers(const sl_auth *a);

/* Who a connection is before it logs in: with authentication off, the
 * built-in "default" with every group; with it on, NULL.  a may be NULL
 * (off). */
const sl_auth_user *sl_auth_anonymous(const sl_auth *a);

/* Outcomes of sl_auth_login. */
enum sl_auth_rc {
    SL_AUTH_OK = 0,      /* *who is set */
    SL_AUTH_WRONG = 1,   /* no such user, user off, or wrong password: counted */
    SL_AUTH_BLOCKED = 2, /* the address has too many recent failures: the
                            password was not looked at; *retry_ms says when */
};

/* Logs user[0..ulen) in with pass[0..plen) for the client at `peer` (an
 * address as text, "10.0.0.7" or "::1"; NULL = a connection without an
 * address) at time now (the server's clock, ms).  The password is compared
 * in constant time; a failure is counted against the peer.  With
 * authentication off, "default" logs in with any password (Redis's
 * `nopass`) and every other name fails.  Returns an sl_auth_rc. */
int sl_auth_login(sl_auth *a, const char *peer, const char *user, size_t ulen, const char *pass,
                  size_t plen, int64_t now, const sl_auth_user **who, int64_t *retry_ms);

/* The failed-login limiter alone, for a credential checked elsewhere (the
 * admin token of /v1/rules): the same count per address as sl_auth_login
 * keeps, so failures of either block both.  sl_auth_may_try: SL_AUTH_OK
 * if `peer` may try now, else SL_AUTH_BLOCKED with *retry_ms (counted as
 * blocked) -- check it before looking at the credential.
 * sl_auth_failed: counts a failure against `peer` (and in stats.failed);
 * who[0..wlen) names what was tried, for the log ("admin-token"). */
int sl_auth_may_try(sl_auth *a, const char *peer, int64_t now, int64_t *retry_ms);
void sl_auth_failed(sl_auth *a, const char *peer, const char *who, size_t wlen, int64_t now);

/* More outcomes, of sl_auth_bearer. */
enum sl_auth_bearer_rc {
    SL_AUTH_MISSING = 3,   /* no credential given */
    SL_AUTH_MALFORMED = 4, /* not "Bearer TOKEN" */
    SL_AUTH_NOPERM = 5,    /* logged in, *who set, but without a group of need */
};

/* Checks the credential of an HTTP-style request (HTTP's Authorization
 * header, gRPC's `authorization` metadata): h[0..hlen) (NULL: none) must
 * be "Bearer TOKEN" -- the scheme in any case, one or more spaces, a
 * token without spaces -- TOKEN being the password of "default" or
 * USER:PASSWORD (split at its first ':'), logged in as sl_auth_login does
 * (constant time, failures counted against peer), and the user must hold
 * every SL_AUTH_* group of need.  With authentication off, or need 0,
 * everyone passes (*who NULL).  Returns SL_AUTH_OK or another
 * sl_auth_rc / sl_auth_bearer_rc (*retry_ms set with SL_AUTH_BLOCKED). */
int sl_auth_bearer(sl_auth *a, const char *peer, const char *h, size_t hlen, unsigned need,
                   int64_t now, const sl_auth_user **who, int64_t *retry_ms);

/* Forgets failures that left their window by now, bounded work; main's
 * expiry timer calls it. */
void sl_auth_expire(sl_auth *a, int64_t now);

/* Counters for INFO.  a may be NULL (all 0). */
typedef struct sl_auth_stats {
    uint64_t ok;         /* logins that succeeded */
    uint64_t failed;     /* wrong user or password */
    uint64_t blocked;    /* refused unchecked: too many failures */
    uint64_t denied_cmd; /* commands refused for want of a group (NOPERM) */
} sl_auth_stats;
void sl_auth_stats_get(const sl_auth *a, sl_auth_stats *out);
/* Counts a command refused for want of a group.  a may be NULL. */
void sl_auth_count_denied(sl_auth *a);

/* The key failures of `peer` are counted under: the address itself, IPv6
 * cut to its /64, IPv4-mapped IPv6 as IPv4, "local" for NULL.  Writes at
 * most cap bytes; returns the key's length.  (For the tests.) */
size_t sl__auth_peer_key(const char *peer, char *key, size_t cap);

/* The SHA-256 of p[0..n) into out. */
void sl__auth_sha256(const void *p, size_t n, unsigned char out[SL_AUTH_DIGEST]);

#endif
