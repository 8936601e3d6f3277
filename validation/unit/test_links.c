/* Writes never go through a link (issue 31; docs/RELIABILITY.md "What is promised"): each writer of
 * a run or serve directory refuses a symbolic link (also a dangling one), a pipe or a directory under
 * its name, naming the file, without blocking, and leaves a link's target as it was. The script
 * test_links.sh plants the same links before a run, which rundir_check_names refuses first; here
 * each writer is tried alone, as a link planted while a run is going would meet it:
 * publish_file_open (append and rewrite), runlog_open (log.txt, metrics.jsonl), evtrace_open
 * (serve's trace.json), publish_text (exit_status, run_id, profile.json, energy.json, ...).
 * Files live in a mkdtemp directory; stderr is captured to a file. */
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "evtrace.h"
#include "publish.h"
#include "runlog.h"
#include "tap.h"

static char tmpdir[] = "/tmp/test_links.XXXXXX";
#include "capture.h"

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

/* 1 if path holds exactly text. */
static int holds(const char *path, const char *text)
{
    char buf[256] = "";
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return !strcmp(buf, text);
}

/* dir/name as a link to a fresh victim file holding "VICTIM\n". */
static void plant(const char *name, const char *victim)
{
    write_text(tpath(victim), "VICTIM\n");
    unlink(tpath(name));
    if (symlink(tpath(victim), tpath(name)) != 0) tap_diag("symlink %s: %s", name, strerror(errno));
}

static void test_file_open(void)
{
    FILE *f = NULL;
    for (int append = 0; append < 2; append++) {
        plant("link.txt", "victim.txt");
        capture_begin();
        int rc = publish_file_open(tpath("link.txt"), append, &f);
        capture_end();
        tap_ok(rc == MP_ERR && strstr(errtext, "link.txt: it is a symbolic link") && holds(tpath("victim.txt"), "VICTIM\n"),
               "publish_file_open (%s): a link is refused naming it, its target unchanged", append ? "append" : "rewrite");
        show_errtext();
    }
    unlink(tpath("dangling.txt"));
    if (symlink(tpath("nowhere.txt"), tpath("dangling.txt")) != 0) tap_diag("symlink: %s", strerror(errno));
    capture_begin();
    int rc = publish_file_open(tpath("dangling.txt"), 1, &f);
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "symbolic link") && access(tpath("nowhere.txt"), F_OK) != 0,
           "publish_file_open: a dangling link is refused, its target not created");
    if (mkfifo(tpath("fifo"), 0600) != 0) tap_diag("mkfifo: %s", strerror(errno));
    capture_begin();
    rc = publish_file_open(tpath("fifo"), 0, &f); /* a blocking open would hang here: no reader */
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "fifo: it is a device, pipe or socket"), "publish_file_open: a pipe is refused without blocking");
    show_errtext();
    mkdir(tpath("dir"), 0700);
    capture_begin();
    rc = publish_file_open(tpath("dir"), 1, &f);
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "dir: it is a directory"), "publish_file_open: a directory is refused naming it");
    show_errtext();

    write_text(tpath("plain.txt"), "one\n");
    rc = publish_file_open(tpath("plain.txt"), 1, &f);
    if (rc == MP_OK) fputs("two\n", f), fclose(f);
    tap_ok(rc == MP_OK && holds(tpath("plain.txt"), "one\ntwo\n"), "publish_file_open: a regular file is appended to");
    rc = publish_file_open(tpath("plain.txt"), 0, &f);
    if (rc == MP_OK) fputs("three\n", f), fclose(f);
    tap_ok(rc == MP_OK && holds(tpath("plain.txt"), "three\n"), "publish_file_open: or rewritten from the start");
}

static void test_writers(void)
{
    /* runlog_open: log.txt fine, metrics.jsonl a link */
    mkdir(tpath("run"), 0700);
    plant("run/metrics.jsonl", "victim_m.txt");
    runlog_t log;
    capture_begin();
    int rc = runlog_open(&log, tpath("run"));
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "run/metrics.jsonl: it is a symbolic link") && holds(tpath("victim_m.txt"), "VICTIM\n"),
           "runlog_open: a link at metrics.jsonl is refused naming it, its target unchanged");
    show_errtext();
    unlink(tpath("run/metrics.jsonl"));
    plant("run/log.txt", "victim_l.txt");
    capture_begin();
    rc = runlog_open(&log, tpath("run"));
    capture_end();
    tap_ok(rc == MP_ERR && strstr(errtext, "run/log.txt: it is a symbolic link") && holds(tpath("victim_l.txt"), "VICTIM\n"),
           "runlog_open: a link at log.txt is refused naming it, its target unchanged");

    /* serve's trace.json */
    plant("run/trace.json", "victim_t.txt");
    evtrace_t t;
    capture_begin();
    rc = evtrace_open(&t, tpath("run/trace.json"));
    capture_end();
    tap_ok(rc == MP_ERR && t.f == NULL && strstr(errtext, "trace.json: it is a symbolic link") &&
               holds(tpath("victim_t.txt"), "VICTIM\n"),
           "evtrace_open: a link at serve's trace.json is refused naming it, its target unchanged");
    show_errtext();

    /* published files (exit_status, run_id, deck.ini, profile.json, energy.json, kernel_times) */
    plant("run/exit_status", "victim_e.txt");
    capture_begin();
    rc = publish_text(tpath("run/exit_status"), "0 done\n");
    capture_end();
    struct stat st;
    tap_ok(rc == MP_ERR && strstr(errtext, "exit_status: it is a symbolic link") && holds(tpath("victim_e.txt"), "VICTIM\n") &&
               lstat(tpath("run/exit_status"), &st) == 0 && S_ISLNK(st.st_mode),
           "publish_text: a link at the name is refused naming it, neither it nor its target replaced");
    show_errtext();
}

/* A writer that blocks on a pipe must fail the test, not hang it. */
static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "not ok - a writer blocked for 20 s (an open of a pipe without O_NONBLOCK)\n1..0\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(1);
}

int main(void)
{
    signal(SIGALRM, on_alarm);
    alarm(20);
    if (!mkdtemp(tmpdir)) return perror("mkdtemp"), 1;
    test_writers();
    test_file_open(); /* last: before the fix its pipe case blocked (the alarm ends it) */
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) tap_diag("could not remove %s", tmpdir);
    return tap_done();
}
