/*
 * fauth.c -- forward-auth, `/v1/auth/DOMAIN` with any method (SPEC
 * section 8, docs/http.md "Forward-auth"): a proxy (nginx's auth_request,
 * Traefik's ForwardAuth, Envoy's ext_authz) asks whether the request it
 * holds may pass.  The request becomes the descriptors `sluicectl replay
 * --log-format combined` builds from that request's access-log line --
 * remote_address, method, path without its query, byte for byte as
 * nginx's log writes them -- plus user from --user-header, and is decided
 * as RL.CHECK in DOMAIN (check.c's sl_http_check_run): 200 or
 * --auth-deny-status, an empty body, the rules' headers.
 *
 * Whom to believe: the X-Forwarded-For / X-Real-IP, X-Original-Method /
 * X-Forwarded-Method and X-Original-URI / X-Forwarded-Uri headers are read
 * only from a peer in --trusted-proxies.  From any other peer the request
 * stands for itself: its peer's address, its own method, and as its path
 * what follows DOMAIN in the target (Envoy's path_prefix form).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include "check_int.h"
#include "config.h"
#include "http.h"
#include "http_int.h"
#include "service.h"

#define AUTH_PREFIX "/v1/auth/"

/* An address: AF_INET (a[0..4)) or AF_INET6 (a[0..16)). */
typedef struct ipaddr {
    int family;
    unsigned char a[16];
} ipaddr;

/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d, a dual-stack socket's view
 * of an IPv4 peer) becomes that IPv4 address, as nginx logs it. */
static void unmap(ipaddr *x)
{
    static const unsigned char pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (x->family == AF_INET6 && memcmp(x->a, pre, 12) == 0) {
        memmove(x->a, x->a + 12, 4);
        x->family = AF_INET;
    }
}

/* Text s (n bytes, spaces and tabs around it ignored) to *x; 0 or -1. */
static int addr_parse(const char *s, size_t n, ipaddr *x)
{
    char b[INET6_ADDRSTRLEN + 1];
    while (n > 0 && (*s == ' ' || *s == '\t')) s++, n--;
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (n == 0 || n >= sizeof b) return -1;
    memcpy(b, s, n);
    b[n] = '\0';
    if (inet_pton(AF_INET, b, x->a) == 1)
        x->family = AF_INET;
    else if (inet_pton(AF_INET6, b, x->a) == 1)
        x->family = AF_INET6;
    else
        return -1;
    unmap(x);
    return 0;
}

static int addr_from_sockaddr(const struct sockaddr *sa, ipaddr *x)
{
    if (sa != NULL && sa->sa_family == AF_INET) {
        x->family = AF_INET;
        memcpy(x->a, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
    } else if (sa != NULL && sa->sa_family == AF_INET6) {
        x->family = AF_INET6;
        memcpy(x->a, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
    } else {
        return -1;
    }
    unmap(x);
    return 0;
}

/* x as inet_ntop writes it, into buf (INET6_ADDRSTRLEN bytes): IPv4's
 * dotted quad by hand (inet_ntop goes through sprintf, an eighth of a
 * forward-auth request's instructions under callgrind), IPv6 by inet_ntop. */
static void addr_text(const ipaddr *x, char *buf, size_t cap)
{
    if (x->family != AF_INET) {
        if (inet_ntop(x->family, x->a, buf, (socklen_t)cap) == NULL) buf[0] = '\0';
        return;
    }
    char *o = buf;
    for (int i = 0; i < 4; i++) {
        unsigned v = x->a[i];
        if (v >= 100) *o++ = (char)('0' + v / 100);
        if (v >= 10) *o++ = (char)('0' + v / 10 % 10);
        *o++ = (char)('0' + v % 10);
        *o++ = i < 3 ? '.' : '\0';
    }
}

/* Whether x is in one of cfg's --trusted-proxies blocks. */
static int trusted(const sl_config *cfg, const ipaddr *x)
{
    for (int i = 0; i < cfg->ntrusted; i++) {
        const sl_cidr *c = &cfg->trusted[i];
        if (c->family != x->family) continue;
        int whole = c->bits / 8, rest = c->bits % 8;
        if (memcmp(c->addr, x->a, (size_t)whole) != 0) continue;
        if (rest == 0 || ((x->a[whole] ^ c->addr[whole]) & (0xff00u >> rest) & 0xff) == 0) return 1;
    }
    return 0;
}

/* The client's address (the file's comment): with a trusted peer, the
 * X-Forwarded-For list (every such header, in order) walked from the
 * right, skipping trusted addresses: the first untrusted one, or the
 * left-most when all are trusted -- nginx's real_ip_recursive.  A member
 * that is not an address ends the walk at the peer (as nginx ignores such
 * a header), and so do more than 16 X-Forwarded-For headers.  Without
 * X-Forwarded-For, X-Real-IP when it is one address. */
static ipaddr client_addr(const sl_config *cfg, const sl_hreq *h, const ipaddr *peer)
{
    if (!trusted(cfg, peer)) return *peer;
    const char *xff[16];
    int nx = 0;
    for (int i = 0; i < h->nh; i++)
        if (strcasecmp(h->hname[i], "X-Forwarded-For") == 0) {
            if (nx == 16) return *peer; /* more than anyone sends: believe none */
            xff[nx++] = h->hvalue[i];
        }
    if (nx == 0) {
        const char *r = sl_hreq_header(h, "X-Real-IP");
        ipaddr x;
        return r != NULL && addr_parse(r, strlen(r), &x) == 0 ? x : *peer;
    }
    ipaddr got = *peer;
    for (int i = nx - 1; i >= 0; i--) {
        const char *s = xff[i], *end = s + strlen(s);
        while (end > s) { /* members right to left */
            const char *c = end;
            while (c > s && c[-1] != ',') c--;
            ipaddr x;
            if (addr_parse(c, (size_t)(end - c), &x) != 0) return *peer;
            got = x;
            if (!trusted(cfg, &x)) return got;
            end = c > s ? c - 1 : s;
        }
    }
    return got;
}

const char *sl_hreq_client_host(const sl_config *cfg, const sl_hreq *req, char *buf, size_t cap)
{
    if (cfg->ntrusted == 0) return sl_hreq_peer_host(req);
    ipaddr peer;
    if (addr_from_sockaddr(sl_hreq_peer(req), &peer) != 0) return NULL;
    ipaddr ca = client_addr(cfg, req, &peer);
    addr_text(&ca, buf, cap);
    return buf[0] != '\0' ? buf : NULL;
}

/* s (n bytes) as nginx's access log writes a variable: '"', '\', bytes
 * below 0x20 and from 0x7f as \xXX (upper-case hex), so a descriptor is
 * the bytes `sluicectl replay --log-format combined` reads from the log.
 * Into dst, which has room for 4 * n + 1 bytes; returns its length. */
static size_t log_escape(char *dst, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\') {
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[ch >> 4];
            dst[o++] = hex[ch & 15];
        } else {
            dst[o++] = (char)ch;
        }
    }
    dst[o] = '\0';
    return o;
}

/* The first of headers a, b that is present, or NULL. */
static const char *either(const sl_hreq *h, const char *a, const char *b)
{
    const char *v = sl_hreq_header(h, a);
    return v != NULL ? v : sl_hreq_header(h, b);
}

void sl_http_v1_auth(http_worker *hw, const sl_hreq *req)
{
    const sl_config *cfg = hw->cfg;
    const char *domain = req->path + strlen(AUTH_PREFIX), *rest = strchr(domain, '/');
    size_t dlen = rest ? (size_t)(rest - domain) : strlen(domain);
    if (dlen == 0) {
        sl_http_send_error(&req->a, 404, "Not Found", "no domain: use /v1/auth/DOMAIN");
        return;
    }
    const sl_hreq *h = req;
    ipaddr peer;
    if (addr_from_sockaddr(sl_hreq_peer(req), &peer) != 0) {
        sl_http_send_error(&req->a, 400, "Bad Request", "the peer has no IP address");
        return;
    }
    int trust = trusted(cfg, &peer);
    ipaddr ca = client_addr(cfg, h, &peer);
    char addr[INET6_ADDRSTRLEN];
    addr_text(&ca, addr, sizeof addr);

    const char *m = trust ? either(h, "X-Original-Method", "X-Forwarded-Method") : NULL;
    if (m == NULL) m = req->method_name;
    const char *uri = trust ? either(h, "X-Original-URI", "X-Forwarded-Uri") : NULL;
    if (uri == NULL) uri = rest ? rest : "";
    size_t mlen = strlen(m), plen = strcspn(uri, "?");

    /* the escaped method and path: on the stack unless they are long */
    char stack[1024], *buf = stack;
    if (4 * (mlen + plen) + 2 > sizeof stack && (buf = malloc(4 * (mlen + plen) + 2)) == NULL) {
        sl_http_send_error(&req->a, 503, "Service Unavailable", "out of memory");
        return;
    }
    char *me = buf, *pe = buf + log_escape(buf, m, mlen) + 1;
    size_t melen = (size_t)(pe - me - 1), pelen = log_escape(pe, uri, plen);
    sl_rule_entry ent[4] = {
        {"remote_address", 14, addr, strlen(addr)},
        {"method", 6, me, melen},
        {"path", 4, pe, pelen},
        {"user", 4, NULL, 0},
    };
    int n = 3;
    const char *user = cfg->user_header[0] ? sl_hreq_header(h, cfg->user_header) : NULL;
    if (user != NULL && user[0] != '\0') {
        ent[3].value = user;
        ent[3].valuelen = strlen(user);
        n = 4;
    }
    const sl_rule_entry *descs[4] = {&ent[0], &ent[1], &ent[2], &ent[3]};
    const int ndesc[4] = {1, 1, 1, 1};
    sl_http_check c = {req->a, 0, cfg->auth_deny_status};
    sl_svc_check_req q = {.domain = domain,
                          .dlen = dlen,
                          .n = n,
                          .descs = descs,
                          .ndesc = ndesc,
                          .cost = 1,
                          .at = sl_now_ms()};
    sl_http_check_run(hw, &c, &q);
    if (buf != stack) free(buf);
}
