/* The run directory's lock, run id, fresh-start check and stale temporaries (rundir.h).
 *
 * Why both an O_EXCL file and an fcntl lock: O_EXCL creation is atomic on local file systems, NFS
 * (v3 and later) and Lustre, so two runs never both create the lock, and its text names the holder
 * for the message; but a file alone outlives a killed holder. The fcntl lock is released by the
 * kernel when the holder dies, which tells a stale file from a held one where fcntl locks work, and
 * arbitrates a takeover (two runs finding the same stale file: only one gets the fcntl lock). Where
 * fcntl locks do not reach across nodes (Lustre mounted with localflock, NFS with nolock) we do not
 * trust them: a lock from another host is never taken over automatically, and one from this host
 * only when its pid is gone. flock(2) is not used: on NFS it is emulated with fcntl locks or is
 * node-local, depending on the kernel. */
#include "rundir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "ckpt_files.h"
#include "deck.h"
#include "publish.h"

#define RUNDIR_LOCK_TRIES 40 /* × 50 ms: a holder between creating the file and writing its line */
/* × 50 ms: a live holder may be a job that has just ended (mpiexec returns once it has heard of an
 * abort, while its ranks are still exiting): it gets 10 s to go before the lock is refused */
#define RUNDIR_EXIT_TRIES 200

typedef struct {
    char host[256];
    long pid;
    char started[64];
    char job[64];            /* the batch job (SLURM_JOB_ID, PBS_JOBID) or "-" */
} rundir_holder_t;

/* The batch job this process belongs to, "-" outside one. A requeued job keeps its id and runs again
 * only once its previous attempt has ended, so a lock of the same job is that attempt's, dead. */
static void rundir_job(char *job, size_t n)
{
    const char *id = getenv("SLURM_JOB_ID");
    if (!id || !id[0]) id = getenv("PBS_JOBID");
    snprintf(job, n, "%s", id && id[0] && !strpbrk(id, " \t\n") ? id : "-");
}

/* This process as a holder: host name, pid, the time now. */
static void rundir_me(rundir_holder_t *h)
{
    memset(h, 0, sizeof *h);
    if (gethostname(h->host, sizeof h->host - 1) != 0) snprintf(h->host, sizeof h->host, "unknown");
    h->pid = (long)getpid();
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm) || !strftime(h->started, sizeof h->started, "%Y-%m-%dT%H:%M:%S%z", &tm))
        snprintf(h->started, sizeof h->started, "%lld", (long long)now);
    rundir_job(h->job, sizeof h->job);
}

/* The holder line of the open lock file fd. 1 parsed, 0 empty or not ours. */
static int rundir_holder_read(int fd, rundir_holder_t *h)
{
    char line[512];
    ssize_t got = pread(fd, line, sizeof line - 1, 0);
    if (got <= 0) return 0;
    line[got] = 0;
    memset(h, 0, sizeof *h);
    const int fields = sscanf(line, "host=%255s pid=%ld started=%63s job=%63s", h->host, &h->pid, h->started, h->job);
    if (fields == 3) snprintf(h->job, sizeof h->job, "-"); /* a lock written before the job was recorded */
    return fields >= 3;
}

static int rundir_holder_write(int fd, const char *path, const rundir_holder_t *h)
{
    char line[512];
    int len = snprintf(line, sizeof line, "host=%s pid=%ld started=%s job=%s\n", h->host, h->pid, h->started, h->job);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len || fsync(fd) != 0)
        return MP_FAIL("cannot write the lock file %s: %s", path, strerror(errno));
    return MP_OK;
}

/* fcntl write lock on the whole file, without waiting: 1 taken, 0 held by another process, -1 fcntl
 * locks do not work here (ENOLCK, ENOSYS, EOPNOTSUPP: a file system without them). */
static int rundir_fcntl(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_SETLK, &fl) == 0) return 1;
    return errno == EAGAIN || errno == EACCES ? 0 : -1;
}

/* Whether fd is still the file at path (not unlinked by a releasing holder meanwhile). */
static int rundir_same_file(int fd, const char *path)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_nlink > 0;
}

static int rundir_refuse(const char *dir, const rundir_holder_t *h, const char *why)
{
    return MP_FAIL("run directory %s is in use: locked by host %s pid %ld since %s (%s). Give another --out, or wait "
                   "for that run; if you are sure it is gone, remove %s/lock", dir, h->host, h->pid, h->started, why, dir);
}

/* A lock name that holds no lock file (kind: "symbolic link", ...): never written through, never
 * taken over. MP_ERR, reported. */
static int rundir_refuse_kind(const char *path, const char *kind)
{
    return MP_FAIL("refusing to use the lock file %s: it is a %s, not a regular file (MindPipe never writes "
                   "through one); remove it", path, kind);
}

/* An existing lock file, open as fd: 1 taken over (we now hold it), 0 retry from the start, MP_ERR
 * refused or failed (reported). */
static int rundir_lock_existing(rundir_lock_t *l, const char *dir, int fd, int attempt)
{
    rundir_holder_t old, me;
    rundir_me(&me);
    const int parsed = rundir_holder_read(fd, &old);
    const int got = rundir_fcntl(fd);
    if (got == 0) {
        if (attempt < RUNDIR_EXIT_TRIES) return 0; /* perhaps a job that is still exiting */
        if (!parsed) snprintf(old.host, sizeof old.host, "?"), old.pid = -1, snprintf(old.started, 2, "?");
        return rundir_refuse(dir, &old, "it holds the lock");
    }
    if (!rundir_same_file(fd, l->path)) return 0; /* released (unlinked) while we looked: start over */
    if (!parsed) {
        if (attempt < RUNDIR_LOCK_TRIES) return 0; /* a holder between creating the file and writing it */
        MP_WARN("taking over %s: it names no holder (a run killed as it started)", l->path);
        return rundir_holder_write(fd, l->path, &me) == MP_OK ? 1 : MP_ERR;
    }
    if (strcmp(old.job, "-") != 0 && strcmp(old.job, me.job) == 0 && old.pid != me.pid) {
        MP_WARN("taking over the lock %s of host %s pid %ld (started %s): it is an earlier attempt of this batch job "
                "(%s), which has ended", l->path, old.host, old.pid, old.started, me.job);
        return rundir_holder_write(fd, l->path, &me) == MP_OK ? 1 : MP_ERR;
    }
    if (strcmp(old.host, me.host) != 0)
        return rundir_refuse(dir, &old, "a process on another host, whose liveness cannot be checked from here");
    if (old.pid == me.pid || kill((pid_t)old.pid, 0) == 0 || errno != ESRCH) {
        if (old.pid != me.pid && attempt < RUNDIR_EXIT_TRIES) return 0; /* perhaps a job that is still exiting */
        return rundir_refuse(dir, &old, "that process is alive on this host");
    }
    MP_WARN("taking over the stale lock %s of host %s pid %ld (started %s): that process is gone%s", l->path, old.host,
            old.pid, old.started, got < 0 ? "; fcntl locks do not work on this file system" : "");
    return rundir_holder_write(fd, l->path, &me) == MP_OK ? 1 : MP_ERR;
}

int rundir_lock(rundir_lock_t *l, const char *dir)
{
    l->fd = -1;
    if ((size_t)snprintf(l->path, sizeof l->path, "%s/lock", dir) >= sizeof l->path)
        return MP_FAIL("run directory %s: its path is too long", dir);
    for (int attempt = 0;; attempt++) {
        /* O_EXCL never follows a link; O_NOFOLLOW keeps the second open below from doing so */
        int fd = open(l->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) {
            rundir_holder_t me;
            rundir_me(&me);
            rundir_fcntl(fd); /* ours alone: the file is new (a failure means no fcntl locks here) */
            if (rundir_holder_write(fd, l->path, &me) != MP_OK) {
                unlink(l->path);
                close(fd);
                return MP_ERR;
            }
            l->fd = fd;
            return MP_OK;
        }
        if (errno != EEXIST) return MP_FAIL("cannot create the lock file %s: %s", l->path, strerror(errno));
        if ((fd = open(l->path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)) < 0) {
            if (errno == ENOENT) continue; /* released meanwhile */
            if (errno == ELOOP) return rundir_refuse_kind(l->path, "symbolic link");
            return MP_FAIL("cannot open the lock file %s: %s", l->path, strerror(errno));
        }
        struct stat st;
        if (fstat(fd, &st) != 0) {
            const int e = errno;
            close(fd);
            return MP_FAIL("cannot open the lock file %s: %s", l->path, strerror(e));
        }
        if (!S_ISREG(st.st_mode)) { /* a device or a pipe: not a lock we could judge */
            close(fd);
            return rundir_refuse_kind(l->path, "device, pipe or socket");
        }
        int took = rundir_lock_existing(l, dir, fd, attempt);
        if (took == 1) {
            l->fd = fd;
            return MP_OK;
        }
        close(fd); /* also drops any fcntl lock we took on it */
        if (took != 0) return MP_ERR;
        usleep(50000);
    }
}

void rundir_unlock(rundir_lock_t *l)
{
    if (l->fd < 0) return;
    /* unlink while still holding the fcntl lock: a waiter that opened the old file finds it unlinked */
    if (rundir_same_file(l->fd, l->path) && unlink(l->path) != 0)
        MP_WARN("cannot remove the lock file %s: %s", l->path, strerror(errno));
    close(l->fd);
    l->fd = -1;
}

/* The local time now as YYYYmmdd-HHMMSS, for the names of what is moved aside. */
static void rundir_stamp(char *stamp_p, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    snprintf(stamp_p, n, "0");
    if (localtime_r(&now, &tm)) strftime(stamp_p, n, "%Y%m%d-%H%M%S", &tm);
}

int rundir_move_aside(const char *dir, const char *name, char *to_p, size_t n)
{
    char stamp[32], aside[4400], from[4400];
    rundir_stamp(stamp, sizeof stamp);
    snprintf(aside, sizeof aside, "%s/foreign-%s", dir, stamp);
    snprintf(from, sizeof from, "%s/%s", dir, name);
    if (mkdir(aside, 0777) != 0 && errno != EEXIST) return MP_FAIL("cannot create %s to move %s aside: %s", aside, from, strerror(errno));
    if ((size_t)snprintf(to_p, n, "%s/%s", aside, name) >= n) return MP_FAIL("cannot move %s aside: the path is too long", from);
    struct stat st;
    for (int k = 2; lstat(to_p, &st) == 0; k++) /* never over an earlier one */
        if (k == 1000 || (size_t)snprintf(to_p, n, "%s/%s.%d", aside, name, k) >= n)
            return MP_FAIL("cannot move %s aside into %s: too many files of that name there", from, aside);
    if (rename(from, to_p) != 0) return MP_FAIL("cannot move %s to %s: %s", from, to_p, strerror(errno));
    return publish_fsync_path(dir, 1);
}

/* The logs a run appends to: --restart moves them aside with the checkpoints, so the new run's
 * steps are not appended to the old run's; and recovery.log's boundary logs and survivors'
 * snapshots (recovery.h), which belong to the old run's checkpoints. */
static const char *const rundir_logs[] = {"log.txt", "metrics.jsonl", "bndlog", "recovery"};
#define RUNDIR_NLOGS ((int)(sizeof rundir_logs / sizeof rundir_logs[0]))

/* --restart: moves dir's logs into old (the checkpoints' new place), listing the names moved in
 * said_p (n bytes). MP_OK or MP_ERR naming the file. */
static int rundir_move_logs(const char *dir, const char *old, char *said_p, size_t n)
{
    size_t len = 0;
    said_p[0] = 0;
    for (int i = 0; i < RUNDIR_NLOGS; i++) {
        char from[4400], to[4500];
        struct stat st;
        snprintf(from, sizeof from, "%s/%s", dir, rundir_logs[i]);
        snprintf(to, sizeof to, "%s/%s", old, rundir_logs[i]);
        if (lstat(from, &st) != 0) continue; /* none: nothing to move */
        if (rename(from, to) != 0) return MP_FAIL("--restart: cannot move %s to %s: %s", from, to, strerror(errno));
        if (len < n) len += (size_t)snprintf(said_p + len, n - len, "%s%s", len ? ", " : "", rundir_logs[i]);
    }
    return MP_OK;
}

int rundir_fresh(const char *dir, int restart, char *moved_p, size_t n)
{
    char ck[4300], newest[4400] = "", old[4400], logs[64];
    ckpt_file_t *files = NULL;
    int count = 0, nlogs = 0;
    moved_p[0] = 0;
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    if (ckpt_dir_list(ck, &files, &count) != MP_OK) count = 0;
    if (count > 0) snprintf(newest, sizeof newest, "%s/%s", ck, files[count - 1].name);
    free(files);
    for (int i = 0; restart && i < RUNDIR_NLOGS; i++) {
        struct stat st;
        snprintf(old, sizeof old, "%s/%s", dir, rundir_logs[i]);
        nlogs += lstat(old, &st) == 0;
    }
    if (count == 0 && nlogs == 0) return MP_OK;
    if (!restart)
        return MP_FAIL("run directory %s already holds %d checkpoint(s) (newest %s) of an earlier run: a fresh run "
                       "there would mix with them. Continue that run with --resume auto, or start over with --restart "
                       "(moves %s aside to %s/ckpt.old-TIME/, deletes nothing), or give another --out",
                       dir, count, newest, ck, dir);
    char stamp[32];
    rundir_stamp(stamp, sizeof stamp);
    snprintf(old, sizeof old, "%s/ckpt.old-%s", dir, stamp);
    for (int k = 2; access(old, F_OK) == 0 && k < 1000; k++) snprintf(old, sizeof old, "%s/ckpt.old-%s-%d", dir, stamp, k);
    struct stat st;
    if (lstat(ck, &st) == 0) {
        if (rename(ck, old) != 0) return MP_FAIL("--restart: cannot move %s to %s: %s", ck, old, strerror(errno));
    } else if (mkdir(old, 0777) != 0) { /* logs without checkpoints: they still go aside */
        return MP_FAIL("--restart: cannot create %s: %s", old, strerror(errno));
    }
    if (mkdir(ck, 0777) != 0) return MP_FAIL("--restart: cannot create %s: %s", ck, strerror(errno));
    if (rundir_move_logs(dir, old, logs, sizeof logs) != MP_OK) return MP_ERR;
    if (count > 0)
        snprintf(moved_p, n, "--restart: the %d checkpoint(s) of the earlier run (newest %s)%s%s moved to %s", count,
                 strrchr(newest, '/') + 1, logs[0] ? " and its " : "", logs, old);
    else
        snprintf(moved_p, n, "--restart: the earlier run's %s moved to %s", logs, old);
    return publish_fsync_path(dir, 1);
}

/* The files a run writes in RUN/ (besides ckpt/ and the lock, which rundir_lock judges). */
static const char *const rundir_names[] = {"log.txt", "metrics.jsonl", "exit_status", "deck.ini", "run_id",
                                           "trace.json", "profile.json", "energy.json"};

/* MP_ERR naming dir/name if something other than a regular file is there; MP_OK if nothing or a file. */
static int rundir_check_name(const char *dir, const char *name)
{
    char path[4600];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) return MP_OK;
    return MP_FAIL("refusing to run in %s: %s is a %s, not a regular file (MindPipe writes that file and never "
                   "through a link, nor over anything but a file): remove it, or give another --out", dir, path,
                   S_ISLNK(st.st_mode) ? "symbolic link" : S_ISDIR(st.st_mode) ? "directory" : "device, pipe or socket");
}

int rundir_check_names(const char *dir)
{
    int rc = MP_OK;
    for (size_t i = 0; i < sizeof rundir_names / sizeof rundir_names[0]; i++)
        if (rundir_check_name(dir, rundir_names[i]) != MP_OK) rc = MP_ERR;
    DIR *dh = opendir(dir);
    if (!dh) return MP_FAIL("cannot list %s: %s", dir, strerror(errno));
    for (struct dirent *de; (de = readdir(dh));) { /* kernel_times.r<rank>.json */
        const size_t len = strlen(de->d_name);
        if (strncmp(de->d_name, "kernel_times.r", 14) == 0 && len > 19 && strcmp(de->d_name + len - 5, ".json") == 0 &&
            rundir_check_name(dir, de->d_name) != MP_OK)
            rc = MP_ERR;
    }
    closedir(dh);
    return rc;
}

/* Whether name is a temporary of publish.h: NAME.tmp or NAME.tmp.DIGITS (NAME not empty). */
static int rundir_is_temporary(const char *name)
{
    for (const char *t = strstr(name, ".tmp"); t; t = strstr(t + 1, ".tmp")) {
        if (t == name) continue;
        const char *p = t + 4;
        if (!*p) return 1;
        if (*p++ != '.' || !*p) continue;
        while (*p >= '0' && *p <= '9') p++;
        if (!*p) return 1;
    }
    return 0;
}

static int rundir_clean_dir(const char *d, runlog_t *log)
{
    DIR *dh = opendir(d);
    if (!dh) return errno == ENOENT ? MP_OK : MP_FAIL("cannot list %s: %s", d, strerror(errno));
    int rc = MP_OK;
    for (struct dirent *de; (de = readdir(dh));) {
        char path[4600];
        struct stat sb;
        if (!rundir_is_temporary(de->d_name)) continue;
        snprintf(path, sizeof path, "%s/%s", d, de->d_name);
        if (lstat(path, &sb) != 0 || S_ISDIR(sb.st_mode)) continue;
        if (unlink(path) != 0) rc = MP_FAIL("cannot remove the stale temporary %s: %s", path, strerror(errno));
        else runlog_printf(log, "removed %s: a temporary left by an interrupted write", path);
    }
    closedir(dh);
    return rc;
}

int rundir_clean_temporaries(const char *dir, runlog_t *log)
{
    static const char *const subs[] = {"ckpt", "bndlog", "recovery"};
    int rc = rundir_clean_dir(dir, log);
    for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
        char d[4300];
        snprintf(d, sizeof d, "%s/%s", dir, subs[i]);
        if (rundir_clean_dir(d, log) != MP_OK) rc = MP_ERR;
    }
    return rc;
}

int rundir_id_new(char id_p[CKPT_RUN_ID_LEN + 1])
{
    unsigned char b[CKPT_RUN_ID_LEN / 2];
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f) return MP_FAIL("cannot open /dev/urandom for a run id: %s", strerror(errno));
    size_t got = fread(b, 1, sizeof b, f);
    fclose(f);
    if (got != sizeof b) return MP_FAIL("cannot read /dev/urandom for a run id");
    for (size_t i = 0; i < sizeof b; i++) snprintf(id_p + 2 * i, 3, "%02x", b[i]);
    return MP_OK;
}

/* 1 if id is 32 lowercase hex digits. */
static int rundir_id_valid(const char *id)
{
    size_t i = 0;
    for (; id[i]; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return 0;
    return i == CKPT_RUN_ID_LEN;
}

int rundir_id_read(const char *dir, char id_p[CKPT_RUN_ID_LEN + 1])
{
    char path[4300], line[128] = "";
    snprintf(path, sizeof path, "%s/run_id", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        id_p[0] = 0;
        return errno == ENOENT ? MP_OK : MP_FAIL("cannot read %s: %s", path, strerror(errno));
    }
    const int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    line[strcspn(line, "\n")] = 0;
    if (!got || !rundir_id_valid(line))
        return MP_FAIL("%s does not hold a run id (32 hex digits): remove it to let the run adopt its checkpoints' id",
                       path);
    snprintf(id_p, CKPT_RUN_ID_LEN + 1, "%s", line);
    return MP_OK;
}

int rundir_id_write(const char *dir, const char *id)
{
    char path[4300], line[CKPT_RUN_ID_LEN + 2];
    snprintf(path, sizeof path, "%s/run_id", dir);
    snprintf(line, sizeof line, "%s\n", id);
    return publish_text(path, line);
}

/* ---- making and claiming the directory (rank 0, run.c's run_out_dir) ---------------------------- */

int rundir_mkdir_p(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return MP_FAIL("cannot create directory %s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0777) != 0 && errno != EEXIST) return MP_FAIL("cannot create directory %s: %s", tmp, strerror(errno));
    return MP_OK;
}

/* deck.ini: written to a temporary name and published (publish.h), so a crash never leaves half a
 * deck. MP_OK or MP_ERR naming the file. */
static int rundir_write_deck(const char *dir, const deck_t *d)
{
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/deck.ini", dir);
    if (publish_tmp_name(path, tmp, sizeof tmp) != MP_OK || publish_tmp_prepare(tmp) != MP_OK) return MP_ERR;
    FILE *f = publish_tmp_fopen(tmp);
    if (!f) return MP_FAIL("cannot write %s: %s", tmp, strerror(errno));
    int rc = deck_write(d, f);
    if (fflush(f) != 0 || ferror(f)) rc = MP_FAIL("cannot write %s: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && rc == MP_OK) rc = MP_FAIL("cannot write %s: %s", tmp, strerror(errno));
    if (rc != MP_OK) {
        publish_discard(tmp);
        return MP_ERR;
    }
    return publish_commit(tmp, path);
}

int rundir_exit_status(const char *dir, const char *text)
{
    char path[4200], line[1200];
    snprintf(path, sizeof path, "%s/exit_status", dir);
    snprintf(line, sizeof line, "%s\n", text);
    return publish_text(path, line);
}

int rundir_claim(const char *dir, int resume, int restart, int quiet, const deck_t *d, runlog_t *log,
                 char run_id[CKPT_RUN_ID_LEN + 1])
{
    char ck[4200], moved[9000] = "";
    snprintf(ck, sizeof ck, "%s/ckpt", dir);
    if (rundir_check_names(dir) != MP_OK) return MP_ERR; /* links and devices: refused, touching nothing */
    if (!resume && rundir_fresh(dir, restart, moved, sizeof moved) != MP_OK) return MP_ERR;
    if (rundir_mkdir_p(ck) != MP_OK || runlog_open(log, dir) != MP_OK) return MP_ERR;
    log->quiet = quiet; /* runlog_open starts from a clean runlog_t */
    if (moved[0]) runlog_printf(log, "%s", moved);
    if (rundir_clean_temporaries(dir, log) != MP_OK) return MP_ERR;
    if (resume) {
        if (rundir_id_read(dir, run_id) != MP_OK) return MP_ERR;
    } else if (rundir_id_new(run_id) != MP_OK || rundir_id_write(dir, run_id) != MP_OK) {
        return MP_ERR;
    }
    if (rundir_exit_status(dir, "- running") != MP_OK) return MP_ERR; /* an abort leaves it saying so */
    return rundir_write_deck(dir, d);
}
