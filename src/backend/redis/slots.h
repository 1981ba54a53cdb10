/*
 * slots.h -- Redis Cluster's key slots (--backend redis-cluster://): the
 * slot of a key as Redis computes it (CRC16 of the key, or of its hash
 * tag, modulo 16384), and a map from slot to the master that serves it.
 *
 * No sockets: the backend (route.c) reads CLUSTER SLOTS and fills
 * the map; MOVED updates one slot.  docs/fleet.md, "Redis Cluster".
 */
#ifndef SL_SLOTS_H
#define SL_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#define SL_SLOTS 16384 /* Redis Cluster's hash slots */

/* CRC16-CCITT (XModem: polynomial 0x1021, initial 0), Redis Cluster's. */
uint16_t sl_crc16(const void *s, size_t len);

/* The slot of key[0..len), as Redis Cluster computes it: when the key
 * holds a '{' followed later by a '}' with at least one byte between the
 * first '{' and the first '}' after it, only those bytes are hashed (the
 * hash tag); else the whole key. */
int sl_key_slot(const char *key, size_t len);

/* The slot map: slot -> a master's index (0..), or -1 = no master known. */
typedef struct sl_slotmap {
    int16_t node[SL_SLOTS];
} sl_slotmap;

/* Every slot unknown. */
void sl_slotmap_clear(sl_slotmap *m);

/* Slots lo..hi (inclusive, 0 <= lo <= hi < SL_SLOTS) served by node.
 * Returns 0, or -1 when the range is not valid (nothing set). */
int sl_slotmap_set(sl_slotmap *m, int lo, int hi, int node);

/* Slots no master serves: 0 when the map covers all of them. */
int sl_slotmap_uncovered(const sl_slotmap *m);

#endif
