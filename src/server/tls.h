/*
 * tls.h -- the TLS of sluiced's TLS listeners (--tls-port): one OpenSSL
 * context made at start from --tls-cert-file, --tls-key-file,
 * --tls-ca-cert-file and --tls-auth-clients, shared by every worker; each
 * TLS connection gets an SSL of its own from it, which net.c runs through a
 * libevent bufferevent_openssl (docs/sluiced.md, "TLS").  --https-port and
 * --grpc-tls-port use the same context (gRPC's connections with ALPN h2).
 *
 * What it accepts: TLS 1.2 and 1.3 only, OpenSSL's default ciphers at the
 * system's security level, no renegotiation, no compression.  Client
 * certificates as Redis's tls-auth-clients: required (yes, the default),
 * checked if shown (optional), or not asked for (no); those of
 * --tls-ca-cert-file's CAs pass.
 *
 * Files are read as sluiced reads every file it is given: opened with
 * O_NONBLOCK (a FIFO in place of a certificate cannot block the start),
 * only a regular file of at most SL_TLS_MAX_FILE bytes, then parsed from
 * memory.  The key is wiped from our copy once OpenSSL has it.  Every error
 * names the option, the file and the reason -- the system's or OpenSSL's:
 *
 *     --tls-cert-file '/etc/sluiced/tls/server.crt': cannot read it: No such file or directory
 *     --tls-key-file '/etc/sluiced/tls/server.key' does not match --tls-cert-file
 *         '/etc/sluiced/tls/server.crt' (OpenSSL: key values mismatch)
 *
 * Files are read once: a renewed certificate takes a restart.
 *
 * Threads: sl_tls_new and sl_tls_free run on one thread (main), before
 * the workers start and after they have stopped; sl_tls_ssl_new and
 * sl_tls_why may be called from any thread (OpenSSL's SSL_CTX is safe to
 * share once set up).
 */
#ifndef SL_TLS_H
#define SL_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

#include "server.h"

#define SL_TLS_MAX_FILE (1 << 20) /* bytes of a certificate, key or CA file */

typedef struct sl_tls sl_tls;

/* Reads cfg's certificate, key and CAs and builds the context.  cfg
 * asks for TLS (cfg->tls_port >= 0; config.c checked that the cert and key
 * are given, and a CA with --tls-auth-clients yes or optional).  Returns
 * the context, or NULL with a message in err naming the option, the file
 * and the reason; nothing is kept then. */
sl_tls *sl_tls_new(const sl_config *cfg, char *err, size_t errlen);

/* Frees t (NULL is fine).  After every SSL made from it is freed. */
void sl_tls_free(sl_tls *t);

/* A new server-side SSL for one accepted connection, not yet bound to a
 * socket; the caller owns it.  h2: the connection speaks HTTP/2 (gRPC):
 * ALPN selects "h2" (a client offering other protocols only is refused);
 * otherwise ALPN selects nothing.  NULL when out of memory. */
SSL *sl_tls_ssl_new(sl_tls *t, int h2);

/* For the log, logfmt fields: the certificate's subject and end of
 * validity, what clients must show, the protocols; and in *expired 1 if
 * the certificate is outside its validity now. */
const char *sl_tls_describe(const sl_tls *t, char *buf, size_t cap, int *expired);

/* Why a handshake failed, for the log: OpenSSL's reasons for errs[0..n)
 * (the codes bufferevent_get_openssl_error hands over), then, when the
 * client's certificate was refused, the check's verdict; "connection
 * closed" when there is neither (the client went away, or sent nothing
 * TLS could read).  ssl may be NULL.  Returns buf. */
const char *sl_tls_why(const SSL *ssl, const unsigned long *errs, int n, char *buf, size_t cap);

#endif
