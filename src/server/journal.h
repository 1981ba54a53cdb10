/*
 * journal.h -- the decision journal of one sluiced on the local backend
 * (--journal FILE, --journal-fsync always|everysec|no; docs/durability.md).
 *
 * What it records.  After every request that may have changed a counter,
 * the local backend calls sl_journal_record (its recorder,
 * backend_local.h), which appends the counter's new state -- its image,
 * exactly a snapshot record, or "gone" after RL.RESET -- with a number
 * taken while the counter was held (src/lib/snapshot.h: sl__store_image),
 * to a buffer of the worker's own.  States, not requests: putting a state
 * back needs no engine, no parameters and no clock, and the numbers order
 * two workers' records of one key as the key saw them, whatever order
 * their writes reach the file in (replay sorts by number).  The price: a
 * sliding-log key's image is its whole log.
 *
 * Group commit.  When a worker is about to send the replies of a turn
 * (net_conn.c: flush), sl_journal_commit writes its buffer with one
 * write(2); with `always` it then waits for an fdatasync that began after
 * that write -- one worker runs it, the others that wrote meanwhile wait
 * for the same one -- so no reply leaves before its decisions are on disk.
 * With `everysec` a thread runs fdatasync once a second; with `no` the
 * kernel decides.
 *
 * Files.  FILE holds the records since the last snapshot began; while a
 * snapshot is written the previous one is FILE.old.  A snapshot folds the
 * journal (sl_journal_snapshot): FILE becomes FILE.old, a new FILE of
 * generation g+1 begins (its head holds the record number then, `base`),
 * the snapshot is written with mark g+1, and only once it is durable is
 * FILE.old removed.  At start (sl_journal_open), after the snapshot is
 * loaded with its mark m: a file of generation < m is folded in it already
 * (skipped); in one of generation m only records numbered >= its base are
 * newer than the snapshot; one above m is replayed whole.  So a crash at
 * any point leaves files that replay to the state of every record written,
 * never to an earlier one.  The start folds whatever it replayed into a
 * new snapshot at once, so the files of one process are all a start ever
 * replays (record numbers restart at 0).
 */
#ifndef SL_JOURNAL_H
#define SL_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

/* --journal-fsync */
enum { SL_JFSYNC_NO = 0, SL_JFSYNC_EVERYSEC, SL_JFSYNC_ALWAYS };

typedef struct sl_journal sl_journal;

/* What a replay found, for the start's log. */
typedef struct sl_journal_info {
    int files;             /* journal files read (FILE.old, FILE) */
    uint64_t records;      /* records replayed */
    uint64_t skipped;      /* records the snapshot held already */
    int torn;              /* 1: a torn tail was dropped */
    char torn_file[1024];  /* where */
    size_t torn_off;
    size_t torn_bytes;
    uint32_t gen;          /* the generation the new FILE starts */
} sl_journal_info;

/* sl_store_load that also returns the snapshot's mark (0: none), which
 * sl_journal_open needs. */
int sl_journal_load_snapshot(sl_store *s, const char *snapshot, uint64_t *nkeys, uint32_t *mark,
                             char *err, size_t errlen);

/* Replays the journal at path (path.old, then path) onto s, which holds
 * the snapshot with mark `mark` (0: none or unmarked).  Reads each file
 * whole.  Returns 0 with *info, or -1 with err naming the file and the
 * offset of a corrupt record (nothing of that file applied). */
int sl_journal_replay(sl_store *s, const char *path, uint32_t mark, sl_journal_info *info,
                      char *err, size_t errlen);

/* Starts the journal: sl_journal_replay, then folds what it replayed into
 * the snapshot (written with a new mark), begins a fresh FILE and removes
 * FILE.old, and, with everysec, starts the fsync thread.  NULL with err on
 * failure (nothing half-done that a later start cannot redo). */
sl_journal *sl_journal_open(sl_store *s, const char *path, const char *snapshot, int mode,
                            uint32_t mark, sl_journal_info *info, char *err, size_t errlen);

/* The recorder (backend_local.h's sl_local_record_fn): appends the state
 * of (kind, key) of j's store to the calling thread's buffer.  Allocates
 * the buffer on a thread's first record and when an image outgrows it. */
void sl_journal_record(void *j, unsigned kind, const void *key, size_t klen);

/* Called before a worker sends replies: writes the calling thread's
 * buffer (if any) and, with always, waits until it is on disk.  Returns 0,
 * or -1 with always when the write or the fdatasync failed (the replies
 * must not leave: the caller drops them).  Nothing pending: a test of a
 * thread-local pointer. */
int sl_journal_commit(void);

/* Writes the snapshot of s to `snapshot`, folding the journal (above).
 * Returns 0, or -1 with err (the snapshot's or the journal's). */
int sl_journal_snapshot(sl_journal *j, sl_store *s, const char *snapshot, char *err,
                        size_t errlen);

/* Bytes written to the journal since start; fdatasyncs run. */
void sl_journal_counts(sl_journal *j, uint64_t *bytes, uint64_t *syncs);

/* Stops the fsync thread, writes what threads left in their buffers,
 * fdatasyncs and closes.  NULL is ignored. */
void sl_journal_close(sl_journal *j);

#endif
