/* Atomic publication of a file (no MPI, no HDF5): the writer fills a temporary file beside the
 * final name, closes it, and publish_commit makes it durable and gives it the final name:
 *     fsync(TMP); rename(TMP, PATH); fsync(directory of PATH)
 * A crash at any point leaves under PATH either the old file (or none) or the complete new one,
 * and once publish_commit returns MP_OK the new name survives a power loss too.
 *
 * Every writer of a run-directory file uses it: checkpoints, activation dumps, prepared datasets,
 * trace.json, deck.ini, run_id, exit_status, profile.json, energy.json. Temporary names are PATH.tmp
 * (PATH.tmp.PID for writers that another process may race on the same PATH), so a listing that wants
 * finished files skips them. The files written in place (the logs, serve's trace.json) are opened
 * with publish_file_open. Nothing here writes through a symbolic link or replaces anything but a
 * regular file. */
#ifndef MP_PUBLISH_H
#define MP_PUBLISH_H

#include <stdint.h>

#include <stdio.h>

#include <stddef.h>

/* PATH.tmp into tmp_p (n bytes): the name every rank of a collective writer agrees on. MP_OK, or
 * MP_ERR naming path when it does not fit. */
int publish_tmp_name(const char *path, char *tmp_p, size_t n);

/* PATH.tmp.PID into tmp_p (n bytes): one process's private temporary, for a writer that other
 * processes may run on the same path at the same time (two jobs preparing one dataset). MP_OK, or
 * MP_ERR naming path when it does not fit. */
int publish_tmp_name_pid(const char *path, char *tmp_p, size_t n);

/* Removes whatever is at tmp before the writer creates it (a stale temporary, or a symbolic link
 * that would make the write land outside the run directory). One writer calls it (one rank of a
 * collective, before the collective create). MP_OK, or MP_ERR naming tmp when something there cannot
 * be removed (a directory). */
int publish_tmp_prepare(const char *tmp);
/* Publishes the closed, complete file tmp as path: fsync tmp, rename it over path, fsync path's
 * directory. MP_OK, or MP_ERR with a message naming the file. A failure before the rename removes
 * tmp and leaves path as it was (the old file, or none); so does a path that exists and is not a
 * regular file (a device, pipe, directory or symbolic link is refused, never replaced); a failure of the directory fsync leaves
 * the new file in place under path, though its name may not survive a crash. */
int publish_commit(const char *tmp, const char *path);

/* Removes a temporary that will not be published (the write failed); a missing tmp is fine. */
void publish_discard(const char *tmp);

/* fsync of a closed file (directory = 0) or of a directory (1). MP_OK or MP_ERR naming path. */
int publish_fsync_path(const char *path, int directory);

/* The directory holding path (dirname(3) without modifying path) into dir_p (n bytes). */
void publish_dir_name(const char *path, char *dir_p, size_t n);

/* Opens path for writing in place, for the files that are appended to (append = 1: log.txt,
 * metrics.jsonl) or rewritten as they grow (0: truncated once open), never through a link
 * (O_NOFOLLOW) and only if it is, or is created as, a regular file: a symbolic link, directory,
 * device or pipe under the name is refused and left as it is (a link's target untouched). MP_OK
 * with the stream in *f_p, or MP_ERR with a message naming path. */
int publish_file_open(const char *path, int append, FILE **f_p);

/* Opens the temporary tmp (cleared by publish_tmp_prepare) for writing, creating it exclusively and
 * never through a link (O_EXCL | O_NOFOLLOW): whatever appeared under the name since it was cleared
 * makes it fail instead of being written through. NULL with errno set on failure. Creators of HDF5
 * temporaries use H5F_ACC_EXCL for the same reason. */
FILE *publish_tmp_fopen(const char *tmp);

/* Writes text to path atomically (a temporary named by the pid, created exclusively and never
 * through a link; fsync, rename). Allocates nothing, so a watchdog thread may call it whatever the
 * main thread holds. MP_OK, or MP_ERR naming the file. */
int publish_text(const char *path, const char *text);

/* open(2) of a file to read (or rewrite in place) that must be a regular file: O_NONBLOCK, so that a
 * FIFO planted under the name is refused instead of waiting for a writer; its size in *size_p (may be
 * NULL). The descriptor, or -1 with why filled ("not a regular file (...)", errno 0; or the errno's
 * text, errno kept: ENOENT says the file is missing). */
int publish_open_regular(const char *path, int flags, uint64_t *size_p, char *why, size_t wn);

#endif
