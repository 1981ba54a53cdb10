/*
 * snapshot.h -- the snapshot's record form, one record at a time, and the
 * snapshot's mark (internal to libsluice; snapshot.c).
 *
 * A record's image is exactly what a snapshot holds for it: u16 meta, u16
 * reset code, i64 clock, u32 state bytes, the key, the state.  The server's
 * decision journal (src/server/journal.c) writes the image of every key a
 * decision changed and, at start, puts them back: the same state, byte for
 * byte, as the store held.  The library never writes a file for it.
 */
#ifndef SL_SNAPSHOT_H
#define SL_SNAPSHOT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* Reads all of path (a regular file; a FIFO or a device is refused, not
 * waited on) into *out (malloc'd, *len bytes).  Returns 0, 1 when it does
 * not exist, or -1 with err naming `what` and path ("journal FILE: not a
 * regular file").  The snapshot's load and the journal's replay. */
int sl__read_whole(const char *what, const char *path, uint8_t **out, size_t *len, char *err,
                   size_t errlen);

/* Writes all n bytes at p to fd (EINTR retried): 0, or -1 (errno set). */
int sl__fd_write_all(int fd, const void *p, size_t n);

/* sl_store_save with a mark in the header's second word (0 there before
 * marks existed): the journal's generation this snapshot folds. */
int sl__store_save_mark(sl_store *s, const char *path, uint32_t mark, char *err, size_t errlen);

/* sl_store_load that also returns the mark (0 for a file without one). */
int sl__store_load_mark(sl_store *s, const char *path, uint64_t *nkeys, uint32_t *mark, char *err,
                        size_t errlen);

/* The image of the record of (kind, key) (klen 1..SL_MAX_KEY), taken with
 * the record held, and a number from *seq taken in the same hold: two
 * images of one key are ordered by their numbers as their states are in
 * time.  Returns the image's length -- written at buf only when it is at
 * most cap (else call again with room for it: a new image, a new number)
 * -- or 0 when the key has no record (*seq_out still set: "gone").  O(1)
 * plus the state's size (a sliding log's ring). */
size_t sl__store_image(sl_store *s, unsigned kind, const void *key, size_t klen, uint8_t *buf,
                       size_t cap, _Atomic uint64_t *seq, uint64_t *seq_out);

/* Checks that p[0..len) is exactly one image (as a snapshot's load checks
 * its records).  Returns len, or 0 with *why (a static string). */
size_t sl__store_image_check(const uint8_t *p, size_t len, const char **why);

/* Puts a checked image into s, replacing the key's record. */
void sl__store_image_apply(sl_store *s, const uint8_t *p);

/* Drops the record of (kind, key) if there is one.  Returns 1 if there was. */
int sl__store_image_drop(sl_store *s, unsigned kind, const void *key, size_t klen);

#endif
