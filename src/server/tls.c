/*
 * tls.c -- the TLS context of sluiced's TLS listeners (tls.h).
 *
 * Certificates and keys are parsed from memory (read_file: non-blocking
 * open, regular files only, bounded) rather than with OpenSSL's *_file
 * loaders, which would block on a FIFO and report a missing file as an
 * OpenSSL error code.  The certificate file is a chain: the server's
 * certificate first, then the intermediates it is sent with.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "log.h"
#include "tls.h"

struct sl_tls {
    SSL_CTX *ctx;
    int auth_clients; /* SL_TLS_AUTH_* */
    int h2_idx;       /* SSL ex_data index: set on an SSL that speaks HTTP/2 */
};

/* ALPN (RFC 7301): an SSL made for HTTP/2 (sl_tls_ssl_new's h2, gRPC)
 * takes "h2", which gRPC clients require, and refuses a client that
 * offers protocols without it (no_application_protocol); the others
 * choose none, as before ALPN was known here, whatever the client offers
 * (RESP and HTTP/1.1 need no ALPN). */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    static const unsigned char h2[] = {2, 'h', '2'};
    const sl_tls *t = arg;
    if (SSL_get_ex_data(ssl, t->h2_idx) == NULL) return SSL_TLSEXT_ERR_NOACK;
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, h2, sizeof h2, in, inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* Passwords for PEM: none.  An encrypted key then fails to load instead of
 * OpenSSL asking for its pass phrase on the terminal. */
static int no_password(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return 0;
}

/* What a file that is not a regular file is, for messages. */
static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    return "not a regular file";
}

/* Appends OpenSSL's queued errors to buf[0..cap) as "reason; reason",
 * consuming them; "unknown error" when there is none. */
static const char *ssl_errors(char *buf, size_t cap)
{
    size_t n = 0;
    unsigned long e;
    buf[0] = '\0';
    while ((e = ERR_get_error()) != 0) {
        const char *r = ERR_reason_error_string(e);
        char code[32];
        if (r == NULL) {
            snprintf(code, sizeof code, "error %lx", e);
            r = code;
        }
        int k = snprintf(buf + n, cap - n, "%s%s", n ? "; " : "", r);
        if (k < 0 || (size_t)k >= cap - n) break;
        n += (size_t)k;
    }
    if (n == 0) snprintf(buf, cap, "unknown error");
    return buf;
}

/* Reads the regular file `path` (given as option `opt`) whole: opened
 * non-blocking, at most SL_TLS_MAX_FILE bytes.  Returns a malloc'd copy
 * (the caller wipes and frees it) and its length in *len, or NULL with
 * err naming the option, the file and the reason. */
static char *read_file(const char *opt, const char *path, size_t *len, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        snprintf(err, errlen, "%s '%s': cannot read it: %s", opt, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    char *buf = NULL;
    size_t n = 0;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "%s '%s': cannot read it: %s", opt, path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s '%s': cannot read it: %s, not a file", opt, path,
                 file_kind(st.st_mode));
        goto fail;
    }
    if (st.st_size > SL_TLS_MAX_FILE) {
        snprintf(err, errlen, "%s '%s': larger than %d bytes: not a certificate or key", opt, path,
                 SL_TLS_MAX_FILE);
        goto fail;
    }
    /* one byte more than it says, to see a file that grew meanwhile */
    size_t cap = (size_t)st.st_size + 1;
    if ((buf = malloc(cap)) == NULL) {
        snprintf(err, errlen, "%s '%s': out of memory", opt, path);
        goto fail;
    }
    for (;;) {
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            snprintf(err, errlen, "%s '%s': cannot read it: %s", opt, path, strerror(errno));
            goto fail;
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n == cap) {
            snprintf(err, errlen, "%s '%s': it changed while being read", opt, path);
            goto fail;
        }
    }
    close(fd);
    *len = n;
    return buf;
fail:
    if (buf != NULL) {
        OPENSSL_cleanse(buf, n);
        free(buf);
    }
    close(fd);
    return NULL;
}

static void wipe(char *buf, size_t len)
{
    if (buf == NULL) return;
    OPENSSL_cleanse(buf, len);
    free(buf);
}

/* 1 if the last error OpenSSL queued is "no more PEM blocks", which ends
 * a file of several certificates; then it is cleared. */
static int pem_at_end(void)
{
    unsigned long e = ERR_peek_last_error();
    if (e == 0 || (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE)) {
        ERR_clear_error();
        return 1;
    }
    return 0;
}

/* The certificate chain: the first certificate is the server's, the rest
 * are sent with it. */
static int load_chain(SSL_CTX *ctx, const char *path, char *err, size_t errlen)
{
    const char *opt = "--tls-cert-file";
    char why[256];
    size_t len = 0;
    char *buf = read_file(opt, path, &len, err, errlen);
    if (buf == NULL) return -1;
    int rc = -1, n = 0;
    BIO *b = BIO_new_mem_buf(buf, (int)len);
    X509 *leaf = b ? PEM_read_bio_X509_AUX(b, NULL, no_password, NULL) : NULL;
    if (leaf == NULL) {
        snprintf(err, errlen, "%s '%s': no PEM certificate in it (OpenSSL: %s)", opt, path,
                 ssl_errors(why, sizeof why));
        goto out;
    }
    if (SSL_CTX_use_certificate(ctx, leaf) != 1) {
        snprintf(err, errlen, "%s '%s': its certificate cannot be used (OpenSSL: %s)", opt, path,
                 ssl_errors(why, sizeof why));
        goto out;
    }
    for (;;) {
        X509 *x = PEM_read_bio_X509(b, NULL, no_password, NULL);
        if (x == NULL) break;
        n++;
        if (SSL_CTX_add0_chain_cert(ctx, x) != 1) {
            X509_free(x);
            snprintf(err, errlen, "%s '%s': chain certificate %d cannot be used (OpenSSL: %s)", opt,
                     path, n, ssl_errors(why, sizeof why));
            goto out;
        }
    }
    if (!pem_at_end()) {
        snprintf(err, errlen, "%s '%s': after certificate %d: %s", opt, path, n + 1,
                 ssl_errors(why, sizeof why));
        goto out;
    }
    rc = 0;
out:
    X509_free(leaf);
    BIO_free(b);
    wipe(buf, len);
    return rc;
}

static int load_key(SSL_CTX *ctx, const char *path, const char *cert, char *err, size_t errlen)
{
    const char *opt = "--tls-key-file";
    char why[256];
    size_t len = 0;
    char *buf = read_file(opt, path, &len, err, errlen);
    if (buf == NULL) return -1;
    int rc = -1;
    BIO *b = BIO_new_mem_buf(buf, (int)len);
    EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, no_password, NULL) : NULL;
    if (k == NULL) {
        if (memmem(buf, len, "ENCRYPTED", 9) != NULL)
            snprintf(err, errlen,
                     "%s '%s': the key is encrypted; sluiced reads an unencrypted key (keep "
                     "the file readable by sluiced's user only)",
                     opt, path);
        else
            snprintf(err, errlen, "%s '%s': no PEM private key in it (OpenSSL: %s)", opt, path,
                     ssl_errors(why, sizeof why));
        ERR_clear_error();
        goto out;
    }
    if (SSL_CTX_use_PrivateKey(ctx, k) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
        snprintf(err, errlen, "%s '%s' does not match --tls-cert-file '%s' (OpenSSL: %s)", opt,
                 path, cert, ssl_errors(why, sizeof why));
        goto out;
    }
    rc = 0;
out:
    EVP_PKEY_free(k);
    BIO_free(b);
    wipe(buf, len);
    return rc;
}

/* The CAs whose client certificates pass; their names are sent to the
 * client with the request for a certificate. */
static int load_cas(SSL_CTX *ctx, const char *path, char *err, size_t errlen)
{
    const char *opt = "--tls-ca-cert-file";
    char why[256];
    size_t len = 0;
    char *buf = read_file(opt, path, &len, err, errlen);
    if (buf == NULL) return -1;
    int rc = -1, n = 0;
    X509_STORE *store = SSL_CTX_get_cert_store(ctx);
    BIO *b = BIO_new_mem_buf(buf, (int)len);
    for (X509 *x; b != NULL && (x = PEM_read_bio_X509(b, NULL, no_password, NULL)) != NULL;) {
        n++;
        int ok = X509_STORE_add_cert(store, x) == 1 && SSL_CTX_add_client_CA(ctx, x) == 1;
        X509_free(x);
        if (!ok) {
            snprintf(err, errlen, "%s '%s': certificate %d cannot be used (OpenSSL: %s)", opt, path,
                     n, ssl_errors(why, sizeof why));
            goto out;
        }
    }
    if (!pem_at_end()) {
        snprintf(err, errlen, "%s '%s': after certificate %d: %s", opt, path, n,
                 ssl_errors(why, sizeof why));
        goto out;
    }
    if (n == 0) {
        snprintf(err, errlen, "%s '%s': no PEM certificate in it", opt, path);
        goto out;
    }
    rc = 0;
out:
    BIO_free(b);
    wipe(buf, len);
    return rc;
}

sl_tls *sl_tls_new(const sl_config *cfg, char *err, size_t errlen)
{
    char why[256];
    sl_tls *t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, errlen, "TLS: out of memory");
        return NULL;
    }
    ERR_clear_error();
    t->auth_clients = cfg->tls_auth_clients;
    t->ctx = SSL_CTX_new(TLS_server_method());
    if (t->ctx == NULL) {
        snprintf(err, errlen, "TLS: cannot create the context (OpenSSL: %s)",
                 ssl_errors(why, sizeof why));
        goto fail;
    }
    SSL_CTX *ctx = t->ctx;
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
        snprintf(err, errlen, "TLS: cannot require TLS 1.2 (OpenSSL: %s)",
                 ssl_errors(why, sizeof why));
        goto fail;
    }
    /* no renegotiation: a client could make the server redo the costly
     * part of the handshake at will */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
    /* a client that closes without close_notify (redis-cli, most) has
     * left, as over plain TCP: OpenSSL 3 would call it an error */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
    /* an idle connection keeps no record buffers (about 34 KB each way) */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_default_passwd_cb(ctx, no_password);
    /* sessions are resumed only by this server's own context */
    static const unsigned char sid[] = "sluiced";
    SSL_CTX_set_session_id_context(ctx, sid, sizeof sid - 1);

    if (load_chain(ctx, cfg->tls_cert_file, err, errlen) != 0 ||
        load_key(ctx, cfg->tls_key_file, cfg->tls_cert_file, err, errlen) != 0)
        goto fail;
    if (cfg->tls_ca_cert_file[0] != '\0' && load_cas(ctx, cfg->tls_ca_cert_file, err, errlen) != 0)
        goto fail;
    int mode = SSL_VERIFY_NONE;
    if (cfg->tls_auth_clients == SL_TLS_AUTH_YES)
        mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    else if (cfg->tls_auth_clients == SL_TLS_AUTH_OPTIONAL)
        mode = SSL_VERIFY_PEER;
    SSL_CTX_set_verify(ctx, mode, NULL);
    if ((t->h2_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL)) < 0) {
        snprintf(err, errlen, "TLS: out of memory");
        goto fail;
    }
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, t);
    ERR_clear_error(); /* nothing left on main's queue */
    return t;
fail:
    ERR_clear_error();
    sl_tls_free(t);
    return NULL;
}

void sl_tls_free(sl_tls *t)
{
    if (t == NULL) return;
    SSL_CTX_free(t->ctx);
    free(t);
}

SSL *sl_tls_ssl_new(sl_tls *t, int h2)
{
    SSL *ssl = SSL_new(t->ctx);
    if (ssl != NULL && h2 && SSL_set_ex_data(ssl, t->h2_idx, (void *)t) != 1) {
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

const char *sl_tls_describe(const sl_tls *t, char *buf, size_t cap, int *expired)
{
    static const char *const auth[] = {"no", "yes", "optional"};
    char subject[256] = "?", until[64] = "?";
    X509 *x = SSL_CTX_get0_certificate(t->ctx);
    *expired = 0;
    if (x != NULL) {
        X509_NAME_oneline(X509_get_subject_name(x), subject, sizeof subject);
        const ASN1_TIME *end = X509_get0_notAfter(x);
        struct tm tm;
        if (ASN1_TIME_to_tm(end, &tm) == 1)
            strftime(until, sizeof until, "%Y-%m-%dT%H:%M:%SZ", &tm);
        *expired =
            X509_cmp_current_time(X509_get0_notBefore(x)) > 0 || X509_cmp_current_time(end) < 0;
    }
    snprintf(buf, cap, "subject=%s not_after=%s auth_clients=%s protocols=TLSv1.2,TLSv1.3",
             sl_logq(subject), until, auth[t->auth_clients % 3]);
    return buf;
}

const char *sl_tls_why(const SSL *ssl, const unsigned long *errs, int n, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        /* libevent also hands over SSL_get_error's codes (SSL_ERROR_SSL,
         * SSL_ERROR_SYSCALL): small numbers of no library, which say
         * nothing more */
        if (ERR_GET_LIB(errs[i]) == 0 && !ERR_SYSTEM_ERROR(errs[i])) continue;
        const char *r = ERR_reason_error_string(errs[i]);
        char code[32];
        if (r == NULL) {
            snprintf(code, sizeof code, "error %lx", errs[i]);
            r = code;
        }
        int k = snprintf(buf + used, cap - used, "%s%s", used ? "; " : "", r);
        if (k < 0 || (size_t)k >= cap - used) return buf;
        used += (size_t)k;
    }
    long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (v != X509_V_OK) {
        int k = snprintf(buf + used, cap - used, "%sclient certificate: %s", used ? "; " : "",
                         X509_verify_cert_error_string(v));
        if (k > 0 && (size_t)k < cap - used) used += (size_t)k;
    }
    if (used == 0) snprintf(buf, cap, "connection closed");
    return buf;
}
