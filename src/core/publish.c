/* Atomic file publication: fsync, rename, fsync the directory (publish.h). */
#include "publish.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

int publish_tmp_name(const char *path, char *tmp_p, size_t n)
{
    if ((size_t)snprintf(tmp_p, n, "%s.tmp", path) >= n)
        return MP_FAIL("cannot write %s: its temporary name is longer than %zu bytes", path, n - 1);
    return MP_OK;
}

int publish_tmp_name_pid(const char *path, char *tmp_p, size_t n)
{
    if ((size_t)snprintf(tmp_p, n, "%s.tmp.%ld", path, (long)getpid()) >= n)
        return MP_FAIL("cannot write %s: its temporary name is longer than %zu bytes", path, n - 1);
    return MP_OK;
}

int publish_fsync_path(const char *path, int directory)
{
    int fd = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return MP_FAIL("cannot open %s to fsync it: %s", path, strerror(errno));
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return MP_FAIL("fsync %s: %s", path, strerror(e));
    }
    close(fd);
    return MP_OK;
}

void publish_dir_name(const char *path, char *dir_p, size_t n)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    snprintf(dir_p, n, "%s", dirname(tmp));
}

int publish_tmp_prepare(const char *tmp)
{
    struct stat st;
    if (lstat(tmp, &st) != 0) return MP_OK; /* nothing there */
    /* a stale temporary, or a link someone left: writing through it would land outside the run */
    if (unlink(tmp) != 0)
        return MP_FAIL("cannot write beside %s: a %s is in the way and cannot be removed: %s", tmp,
                       S_ISDIR(st.st_mode) ? "directory" : "file", strerror(errno));
    return MP_OK;
}

void publish_discard(const char *tmp)
{
    if (unlink(tmp) != 0 && errno != ENOENT) MP_WARN("cannot remove the temporary file %s: %s", tmp, strerror(errno));
}

int publish_commit(const char *tmp, const char *path)
{
    /* the contents reach the disk before the name does: a crash after the rename must not find
     * the new name on a file whose blocks were never written */
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) { /* rename would replace a device, a link or a directory */
        publish_discard(tmp);
        return MP_FAIL("refusing to replace %s: it is a %s, not a regular file (%s removed)", path,
                       S_ISLNK(st.st_mode) ? "symbolic link (name its target instead)"
                       : S_ISDIR(st.st_mode) ? "directory"
                                             : "device, pipe or socket",
                       tmp);
    }
    if (publish_fsync_path(tmp, 0) != MP_OK) {
        publish_discard(tmp);
        return MP_ERR;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        publish_discard(tmp);
        return MP_FAIL("cannot rename %s to %s: %s", tmp, path, strerror(e));
    }
    char dir[4096];
    publish_dir_name(path, dir, sizeof dir);
    return publish_fsync_path(dir, 1); /* the rename itself is an update of the directory */
}

/* What a non-regular file at a name is, for the messages. */
static const char *publish_kind(mode_t m)
{
    return S_ISLNK(m) ? "symbolic link" : S_ISDIR(m) ? "directory" : "device, pipe or socket";
}

int publish_file_open(const char *path, int append, FILE **f_p)
{
    /* O_NOFOLLOW: a link under the name fails (ELOOP) instead of being written through; O_NONBLOCK:
     * a FIFO under it must not block the open; nothing is truncated before the file is known regular */
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (append ? O_APPEND : 0), 0644);
    struct stat st;
    if (fd < 0) { /* ELOOP a link, EISDIR a directory, ENXIO a pipe without a reader */
        const int e = errno;
        if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
            return MP_FAIL("refusing to write %s: it is a symbolic link (MindPipe never writes through one: remove it)",
                           path);
        if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return MP_FAIL("refusing to write %s: it is a %s, not a regular file", path, publish_kind(st.st_mode));
        return MP_FAIL("cannot open %s for writing: %s", path, strerror(e));
    }
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        return MP_FAIL("cannot open %s for writing: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return MP_FAIL("refusing to write %s: it is a %s, not a regular file", path, publish_kind(st.st_mode));
    }
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 || (!append && ftruncate(fd, 0) != 0)) {
        const int e = errno;
        close(fd);
        return MP_FAIL("cannot open %s for writing: %s", path, strerror(e));
    }
    FILE *f = fdopen(fd, append ? "a" : "w");
    if (!f) {
        const int e = errno;
        close(fd);
        return MP_FAIL("cannot open %s for writing: %s", path, strerror(e));
    }
    *f_p = f;
    return MP_OK;
}

FILE *publish_tmp_fopen(const char *tmp)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) close(fd);
    return f;
}

int publish_text(const char *path, const char *text)
{
    char tmp[4300];
    if (publish_tmp_name_pid(path, tmp, sizeof tmp) != MP_OK || publish_tmp_prepare(tmp) != MP_OK) return MP_ERR;
    /* O_EXCL | O_NOFOLLOW: whatever appeared under the name since it was cleared is not written through */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return MP_FAIL("cannot write %s: %s", tmp, strerror(errno));
    const size_t n = strlen(text);
    const ssize_t wrote = write(fd, text, n);
    const int e = errno;
    if (close(fd) != 0 || wrote != (ssize_t)n) {
        publish_discard(tmp);
        return MP_FAIL("cannot write %s: %s", tmp, wrote < 0 ? strerror(e) : "short write");
    }
    return publish_commit(tmp, path);
}

int publish_open_regular(const char *path, int flags, uint64_t *size_p, char *why, size_t wn)
{
    const int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        const int e = errno;
        snprintf(why, wn, "%s", strerror(e));
        errno = e;
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        snprintf(why, wn, "%s", strerror(e));
        close(fd);
        errno = e;
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, wn, "not a regular file (a directory, FIFO or device)");
        close(fd);
        errno = 0;
        return -1;
    }
    if (size_p) *size_p = (uint64_t)st.st_size;
    return fd;
}
