/*
 * ring.h -- a consistent-hash ring over Redis servers (--backend
 * redis://a,redis://b,...): which server owns a decision's hash tag.
 *
 * Each node puts SL_RING_VNODES points on a 64-bit circle, at hashes of
 * its identity ("host:port/db") and the point's number; a tag belongs to
 * the node of the first point at or after the tag's hash (wrapping).  A
 * node's points depend on its identity only -- not on the other nodes nor
 * on the order the list names them -- so adding a node moves only the
 * tags its new points take (all of them to it), and removing one moves
 * only its own tags (docs/fleet.md, "Several Redis servers").
 *
 * No sockets, no clock: the backend (route.c) asks sl_ring_node
 * for each request.  Immutable once made: any thread may read it.
 */
#ifndef SL_RING_H
#define SL_RING_H

#include <stddef.h>
#include <stdint.h>

/* Points per node: with V points a node's share of the circle varies by
 * about 1/sqrt(V) of its mean (160: ~8%), and a lookup is a binary search
 * of n*V points (4 nodes: 640 points, 10 steps, in L1). */
#define SL_RING_VNODES 160
#define SL_RING_MAX    64 /* nodes of one ring */

typedef struct sl_ring sl_ring;

/* The 64-bit hash of s[0..len) that places tags and points (FNV-1a, then
 * a 64-bit finalizer so nearby inputs land far apart). */
uint64_t sl_ring_hash(const void *s, size_t len);

/* Makes the ring of n nodes (1..SL_RING_MAX), node i named ids[i]
 * (NUL-terminated, distinct: the caller checks).  NULL when out of memory
 * or n is out of range.  The ring copies what it needs. */
sl_ring *sl_ring_new(const char *const *ids, int n);

void sl_ring_free(sl_ring *r);

/* The node (0..n-1, the index in sl_ring_new's list) that owns tag[0..len).
 * O(log(n * SL_RING_VNODES)). */
int sl_ring_node(const sl_ring *r, const char *tag, size_t len);

/* Node i's share of the circle, 0..1 (the shares sum to 1). */
double sl_ring_share(const sl_ring *r, int node);

int sl_ring_size(const sl_ring *r);

#endif
