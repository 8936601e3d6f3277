/* `mindpipe serve` and `mindpipe serve-stage` (serve.h). */
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"
#include "batcher.h"
#include "check.h"
#include "ckpt_files.h"
#include "deck.h"
#include "deck_model.h"
#include "http.h"
#include "kernels.h"
#include "links.h"
#include "publish.h"
#include "signals.h"
#include "stage.h"
#include "standby.h"

#define SERVE_SECRET_ENV "MINDPIPE_SERVE_SECRET"
#define SERVE_TOKEN_ENV "MINDPIPE_SERVE_TOKEN"
#define SERVE_MAX_STAGES 64
#define SERVE_MAX_SETS 260

/* The front end's one context: what it started and what became of it. */
typedef struct {
    int S, standby;               /* stages; standbys wanted per stage (0 or 1) */
    const run_opts_t *o;
    const serve_opts_t *s;
    char links[4096], hex[2 * WIRE_SECRET_BYTES + 1];
    char host[64];                /* where clients on this machine reach the front end */
    char **envp;                  /* the stages' environment: ours without the MPI launcher's, + the secret */
    pthread_mutex_t mu;           /* the process table and why: the main loop and the batching thread */
    pid_t pid[SERVE_MAX_STAGES];  /* primaries (-1: dead, not yet replaced) */
    pid_t spare[SERVE_MAX_STAGES];/* standbys (-1: none) */
    int l0[SERVE_MAX_STAGES], nl[SERVE_MAX_STAGES];
    int restarts;                 /* processes started to replace dead ones */
    int stopping;                 /* SIGTERM sent to every process: their ends are expected */
    char why[256];                /* the first primary's death since the last failover, "" while all live */
    int hosts;                    /* --links tcp:...: the stages run elsewhere (jobs/slurm/serve.sbatch) */
    links_t l;
    batcher_t b;
    http_t http;
    tokenizer_t tok;              /* the checkpoint's: prompts in, completions out */
} serve_ctx_t;

/* The deck with parallel.pp = stages appended to the --set list: the deck's own rules then check
 * that pipeline.layers (if given) lists that many stages and that every stage gets a layer. */
static int serve_deck(const run_opts_t *o, int stages, deck_t *d, model_cfg_t *cfg)
{
    if (o->nsets >= SERVE_MAX_SETS - 1) return MP_FAIL("more than %d --set options", SERVE_MAX_SETS - 2);
    char pp[64], *sets[SERVE_MAX_SETS];
    snprintf(pp, sizeof pp, "parallel.pp=%d", stages);
    for (int i = 0; i < o->nsets; i++) sets[i] = o->sets[i];
    sets[o->nsets] = pp;
    if (deck_load_model(d, o->deck_path, sets, o->nsets + 1) != MP_OK) return MP_ERR;
    if (d->supernet.enabled) return MP_FAIL("serve runs a plain model: `mindpipe export` a subnet of this supernet first");
    if (deck_chunks_per_stage(d) != 1)
        return MP_FAIL("serving stages hold one range of layers each: parallel.schedule=interleaved does not apply");
    *cfg = deck_model_cfg(d, NULL);
    return MP_OK;
}

static void link_name(char *buf, size_t n, const char *dir, int k) { snprintf(buf, n, "ipc://%s/link%d", dir, k); }

/* Under c->mu: reaps processes that ended: a primary's death is recorded in why, a standby's
 * leaves its stage without one (the main loop starts another). */
static void serve_reap(serve_ctx_t *c)
{
    for (int s = 0; s < c->S; s++)
        for (int k = 0; k < 2; k++) {
            pid_t *p = k ? &c->spare[s] : &c->pid[s];
            int st;
            if (*p <= 0 || waitpid(*p, &st, WNOHANG) != *p) continue;
            char what[160];
            if (WIFSIGNALED(st)) snprintf(what, sizeof what, "died of signal %d", WTERMSIG(st));
            else snprintf(what, sizeof what, "exited with status %d", WEXITSTATUS(st));
            if (!k && !c->why[0]) snprintf(c->why, sizeof c->why, "stage %d (pid %d) %s", s, (int)*p, what);
            if (k && !c->stopping) MP_WARN("serving: the standby of stage %d (pid %d) %s", s, (int)*p, what);
            *p = -1;
        }
}

/* The batcher's down_check: the first primary's death not yet repaired, or NULL. */
static const char *serve_check(void *arg)
{
    serve_ctx_t *c = arg;
    pthread_mutex_lock(&c->mu);
    serve_reap(c);
    const char *why = c->why[0] ? c->why : NULL;
    pthread_mutex_unlock(&c->mu);
    return why;
}

/* The stages' environment, made before any fork (the child of a process with threads may call
 * only async-signal-safe functions before exec): ours without the MPI launcher's variables (a
 * stage is one process and uses no MPI: a PMI_SIZE of the launcher's would make it refuse, main.c)
 * and the HTTP access token, with the secret. */
static int serve_envp(serve_ctx_t *c)
{
    extern char **environ;
    int n = 0;
    while (environ[n]) n++;
    if (!(c->envp = calloc((size_t)n + 2, sizeof *c->envp))) return MP_FAIL("out of memory");
    int k = 0;
    for (int i = 0; i < n; i++)
        if (strncmp(environ[i], "PMI_", 4) && strncmp(environ[i], "HYDRA_", 6) && strncmp(environ[i], "MPIR_", 5) &&
            strncmp(environ[i], SERVE_SECRET_ENV "=", strlen(SERVE_SECRET_ENV) + 1) &&
            strncmp(environ[i], SERVE_TOKEN_ENV "=", strlen(SERVE_TOKEN_ENV) + 1)) /* the front end's alone */
            c->envp[k++] = environ[i];
    static const char key[] = SERVE_SECRET_ENV "=";
    if (!(c->envp[k] = malloc(sizeof key + strlen(c->hex)))) return MP_FAIL("out of memory");
    snprintf(c->envp[k], sizeof key + strlen(c->hex), "%s%s", key, c->hex);
    return MP_OK;
}

/* Under c->mu: starts stage `stage`'s process, a primary or (standby) one that loads its weights and
 * waits for SIGUSR1 to take over. Its pid, or -1 (reported). */
static pid_t spawn_stage(serve_ctx_t *c, int stage, int standby)
{
    const run_opts_t *o = c->o;
    char *argv[2 * SERVE_MAX_SETS + 24], sbuf[16], slots[16], st[16];
    int n = 0;
    snprintf(sbuf, sizeof sbuf, "%d", stage);
    snprintf(slots, sizeof slots, "%d", c->s->slots);
    snprintf(st, sizeof st, "%d", c->S);
    argv[n++] = "mindpipe", argv[n++] = "serve-stage";
    if (o->deck_path) argv[n++] = "-c", argv[n++] = (char *)o->deck_path;
    for (int i = 0; i < o->nsets; i++) argv[n++] = "--set", argv[n++] = o->sets[i];
    argv[n++] = "--ckpt", argv[n++] = (char *)c->s->ckpt, argv[n++] = "--stage", argv[n++] = sbuf;
    argv[n++] = "--stages", argv[n++] = st, argv[n++] = "--slots", argv[n++] = slots;
    argv[n++] = "--links", argv[n++] = c->links;
    /* 1: a standby; 2: a primary that ships its state deltas to its standby */
    if (standby || c->standby) argv[n++] = "--standby", argv[n++] = standby ? "1" : "2";
    argv[n] = NULL;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) return MP_ERROR("fork of serving stage %d failed: %s", stage, strerror(errno)), -1;
    if (pid == 0) {
        execve("/proc/self/exe", argv, c->envp);
        static const char msg[] = "mindpipe: error: exec of a serving stage failed\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(127);
    }
    return pid;
}

/* Under c->mu: DIR/serve.json: every process, its role, stage, layers, pid and address. */
static int serve_write_json(const serve_ctx_t *c)
{
    char path[4200], text[32768], ep[4200];
    int n = snprintf(text, sizeof text, "{\"front_end\": {\"pid\": %d, \"address\": \"http://%s:%d\"},\n \"stages\": [",
                     (int)getpid(), c->host, c->http.port);
    for (int s = 0, first = 1; s < c->S && n < (int)sizeof text; s++) {
        link_name(ep, sizeof ep, c->links, s);
        for (int k = 0; k < 2 && n < (int)sizeof text; k++) {
            const pid_t p = k ? c->spare[s] : c->pid[s];
            if (p <= 0) continue;
            n += snprintf(text + n, sizeof text - (size_t)n,
                          "%s\n  {\"role\": \"%s\", \"stage\": %d, \"layers\": [%d, %d], \"pid\": %d, \"address\": \"%s\"}",
                          first ? "" : ",", k ? "standby" : "primary", s, c->l0[s], c->l0[s] + c->nl[s], (int)p, ep);
            first = 0;
        }
    }
    if (n < (int)sizeof text) n += snprintf(text + n, sizeof text - (size_t)n, "\n ]}\n");
    if (n >= (int)sizeof text) return MP_FAIL("serve.json: too many processes to describe");
    snprintf(path, sizeof path, "%s/serve.json", c->s->out);
    return publish_text(path, text);
}

/* Under c->mu: a standby for every stage that wants one and has none. */
static void serve_fill_standbys(serve_ctx_t *c)
{
    for (int s = 0; s < c->S; s++)
        if (c->standby && c->spare[s] <= 0 && (c->spare[s] = spawn_stage(c, s, 1)) > 0) c->restarts++;
}

/* The batcher's recover: every dead primary replaced by its stage's standby (SIGUSR1: it has its
 * weights and binds the primary's socket) or, without one, by a new process; then new standbys,
 * and serve.json. MP_OK or MP_ERR. */
static int serve_recover(void *arg, uint64_t *promoted_p, uint64_t *restarted_p)
{
    serve_ctx_t *c = arg;
    *promoted_p = *restarted_p = 0;
    int rc = MP_OK;
    pthread_mutex_lock(&c->mu);
    serve_reap(c);
    for (int s = 0; s < c->S && rc == MP_OK; s++) {
        if (c->pid[s] > 0) continue;
        if (c->spare[s] > 0 && kill(c->spare[s], SIGUSR1) == 0) {
            MP_WARN("serving: the standby of stage %d (pid %d) takes over", s, (int)c->spare[s]);
            c->pid[s] = c->spare[s], c->spare[s] = -1;
            *promoted_p |= 1ull << s;
        } else if ((c->pid[s] = spawn_stage(c, s, 0)) > 0) {
            MP_WARN("serving: stage %d restarted (pid %d)", s, (int)c->pid[s]);
            *restarted_p |= 1ull << s;
            c->restarts++;
        } else rc = MP_ERR;
    }
    c->why[0] = 0;
    serve_fill_standbys(c);
    if (rc == MP_OK) serve_write_json(c);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* --listen HOST:PORT (HOST an IPv4 address or localhost) into *l. Beyond loopback only with
 * --public and an access token of at least 16 characters in SERVE_TOKEN_ENV (the environment, not
 * the command line, which every user of the machine can read). With a token every request must
 * carry it, loopback or not. */
static int serve_listen(const char *listen, int public, const char *limits, http_listen_t *l)
{
    memset(l, 0, sizeof *l);
    l->per_client = -1;
    if (limits) {
        char *end;
        const long conns = strtol(limits, &end, 10);
        const long per = *end == ',' ? strtol(end + 1, &end, 10) : -1;
        const double deadline = *end == ',' ? strtod(end + 1, &end) : -1.0;
        if (*end || conns < 8 || conns > 4096 || per < 0 || per > conns || !(deadline >= 0.5 && deadline <= 3600))
            return MP_FAIL("--http-limits %s: give CONNECTIONS,PER_CLIENT,DEADLINE_S with connections in [8, 4096], "
                           "per client in [0, connections] (0: no limit), the deadline in [0.5, 3600] s", limits);
        l->max_conns = (int)conns, l->per_client = (int)per, l->deadline_s = deadline;
    }
    const char *colon = strrchr(listen, ':');
    char *end, host[64];
    const long p = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon[1] == 0 || *end || p < 0 || p > 65535 || (size_t)(colon - listen) >= sizeof host)
        return MP_FAIL("--listen %s: give HOST:PORT with a port in [0, 65535] (0: any free port)", listen);
    snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
    if (!strcmp(host, "localhost")) snprintf(host, sizeof host, "127.0.0.1");
    struct in_addr a;
    if (inet_pton(AF_INET, host, &a) != 1) return MP_FAIL("--listen %s: %s is not an IPv4 address", listen, host);
    l->addr = a.s_addr, l->port = (int)p;
    l->token = getenv(SERVE_TOKEN_ENV);
    if (l->token && strlen(l->token) < 16) return MP_FAIL("%s: an access token has at least 16 characters", SERVE_TOKEN_ENV);
    const int loopback = (ntohl(a.s_addr) >> 24) == 127;
    if (!loopback && !public)
        return MP_FAIL("--listen %s: serving listens on loopback only unless asked: give --public, with an access "
                       "token in %s", listen, SERVE_TOKEN_ENV);
    if (!loopback && !l->token)
        return MP_FAIL("--listen %s --public: set an access token (16 characters or more) in %s; every request must "
                       "then send it as \"Authorization: Bearer TOKEN\"", listen, SERVE_TOKEN_ENV);
    return MP_OK;
}

/* SIGTERM to every serving process still running, up to 5 s for them to end, then SIGKILL. */
static void serve_reap_all(serve_ctx_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    for (int s = 0; s < c->S; s++) {
        if (c->pid[s] > 0) kill(c->pid[s], SIGTERM);
        if (c->spare[s] > 0) kill(c->spare[s], SIGTERM);
    }
    for (int i = 0; i < 50; i++) {
        int left = 0;
        serve_reap(c);
        for (int s = 0; s < c->S; s++) left += (c->pid[s] > 0) + (c->spare[s] > 0);
        if (!left) break;
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
    }
    for (int s = 0; s < c->S; s++)
        for (int k = 0; k < 2; k++) {
            pid_t *p = k ? &c->spare[s] : &c->pid[s];
            if (*p > 0) kill(*p, SIGKILL), waitpid(*p, NULL, 0), *p = -1;
        }
    pthread_mutex_unlock(&c->mu);
}

/* DIR and DIR/sock (0700: only this user reaches the stages' sockets), the links' directory in
 * links (n bytes). MP_OK or MP_ERR. */
static int serve_dirs(const char *out, char *links, size_t n)
{
    if (mkdir(out, 0755) != 0 && errno != EEXIST) return MP_FAIL("--out %s: %s", out, strerror(errno));
    if ((size_t)snprintf(links, n, "%s/sock", out) >= n) return MP_FAIL("--out %s: the path is too long", out);
    if (mkdir(links, 0700) != 0 && errno != EEXIST) return MP_FAIL("%s: %s", links, strerror(errno));
    struct stat st; /* a link there would have chmod, the stale sockets' unlink and the binds act on its target */
    if (lstat(links, &st) != 0) return MP_FAIL("%s: %s", links, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return MP_FAIL("refusing to use %s: it is not a directory (%s); MindPipe never works through a link: remove it",
                       links, S_ISLNK(st.st_mode) ? "a symbolic link" : "another kind of file");
    if (chmod(links, 0700) != 0) return MP_FAIL("%s: %s", links, strerror(errno));
    /* a Unix socket's path has at most 107 bytes */
    if (strlen(links) + 12 > 107) return MP_FAIL("--out %s: too long a path for the stages' sockets (at most 95 bytes)", out);
    return MP_OK;
}

static int serve_start(serve_ctx_t *c, const model_cfg_t *cfg, const http_listen_t *listen)
{
    char first[4200], last[4200];
    unsigned char secret[WIRE_SECRET_BYTES];
    if (serve_dirs(c->s->out, c->links, sizeof c->links) != MP_OK || wire_secret_new(secret, c->hex) != MP_OK ||
        serve_envp(c) != MP_OK)
        return MP_ERR;
    for (int k = 0; k <= c->S; k++) { /* stale sockets of an earlier server in this directory */
        char p[4200];
        snprintf(p, sizeof p, "%s/link%d", c->links, k);
        unlink(p);
    }
    pthread_mutex_lock(&c->mu);
    int rc = MP_OK;
    for (int st = 0; st < c->S && rc == MP_OK; st++)
        if ((c->pid[st] = spawn_stage(c, st, 0)) <= 0) rc = MP_ERR;
    if (rc == MP_OK) serve_fill_standbys(c);
    c->restarts = 0;
    pthread_mutex_unlock(&c->mu);
    if (rc != MP_OK) return MP_ERR;
    char confirm[4200], report[4200], trace[4200];
    link_name(first, sizeof first, c->links, 0);
    link_name(last, sizeof last, c->links, c->S);
    snprintf(confirm, sizeof confirm, "ipc://%s/confirm", c->links);
    snprintf(report, sizeof report, "ipc://%s/report", c->links);
    snprintf(trace, sizeof trace, "%s/trace.json", c->s->out);
    const batcher_links_t bl = {first, last, c->standby ? confirm : NULL, report, trace, NULL, 0};
    if (batcher_start(&c->b, c->s->slots, c->S, cfg->seq_len, cfg->vocab, &bl, secret, 30000, 300000,
                      serve_check, serve_recover, c) != MP_OK)
        return MP_ERR;
    /* after the stages loaded: a file they cannot read is reported by them, naming the stage */
    if (ckpt_file_tokenizer(c->s->ckpt, c->s->tokenizer_dir, &c->tok) != MP_OK ||
        http_start(&c->http, &c->b, listen, cfg->seq_len, cfg->vocab, &c->tok) != MP_OK)
        return MP_ERR;
    if (listen->addr == htonl(INADDR_ANY)) snprintf(c->host, sizeof c->host, "127.0.0.1"); /* every address: this one too */
    else inet_ntop(AF_INET, &(struct in_addr){listen->addr}, c->host, sizeof c->host);
    pthread_mutex_lock(&c->mu);
    rc = serve_write_json(c);
    pthread_mutex_unlock(&c->mu);
    if (rc != MP_OK) return MP_ERR;
    char host[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &(struct in_addr){listen->addr}, host, sizeof host);
    printf("serving %s on http://%s:%d%s: %d stage(s) of layers", c->s->ckpt, host, c->http.port,
           listen->token ? " (access token required)" : "", c->S);
    for (int st = 0; st < c->S; st++) printf(" %s[%d, %d)", st ? "| " : "", c->l0[st], c->l0[st] + c->nl[st]);
    printf(", %d slots, %d standby per stage; %s/serve.json; SIGTERM stops it\n", c->s->slots, c->standby, c->s->out);
    fflush(stdout);
    return MP_OK;
}

/* Several hosts: the batcher's down_check: a stage whose primary missed its heartbeats, or NULL. */
static const char *hosts_check(void *arg)
{
    serve_ctx_t *c = arg;
    return batcher_heartbeats(&c->b, c->why, sizeof c->why) >= 0 ? c->why : NULL;
}

/* Several hosts: DIR/serve.json: the front end, the links, and per stage the host slot (links.h)
 * and host of its primary and of its standby (the slots swap roles at each promotion). */
static int hosts_write_json(const serve_ctx_t *c)
{
    char path[4200], text[32768];
    int n = snprintf(text, sizeof text, "{\"front_end\": {\"pid\": %d, \"address\": \"http://127.0.0.1:%d\"}, \"links\": \"%s\",\n"
                     " \"stages\": [", (int)getpid(), c->http.port, c->s->links);
    for (int k = 0; k < c->S && n < (int)sizeof text; k++) {
        const int p = c->b.gen ? (int)(c->b.gen[k] % 2) : 0;
        n += snprintf(text + n, sizeof text - (size_t)n,
                      "%s\n  {\"stage\": %d, \"primary\": {\"slot\": %d, \"host\": \"%s\"}, \"standby\": {\"slot\": %d, "
                      "\"host\": \"%s\"}}", k ? "," : "", k, p, c->l.host[1 + 2 * k + p], 1 - p, c->l.host[2 + 2 * k - p]);
    }
    if (n < (int)sizeof text) n += snprintf(text + n, sizeof text - (size_t)n, "\n ]}\n");
    if (n >= (int)sizeof text) return MP_FAIL("serve.json: too many stages to describe");
    snprintf(path, sizeof path, "%s/serve.json", c->s->out);
    return publish_text(path, text);
}

/* Several hosts: the batcher's recover: every stage whose primary is silent has its standby
 * promoted by message; the processes are started elsewhere (jobs/slurm/serve.sbatch starts a new
 * standby where the dead one ran), so a stage without a live standby takes the pipeline down.
 * MP_OK or MP_ERR. */
static int hosts_recover(void *arg, uint64_t *promoted_p, uint64_t *restarted_p)
{
    serve_ctx_t *c = arg;
    char why[256];
    *promoted_p = *restarted_p = 0;
    for (int k, n = 0; n < c->S && (k = batcher_heartbeats(&c->b, why, sizeof why)) >= 0; n++) {
        if (batcher_promote(&c->b, k) != MP_OK) return MP_ERR;
        *promoted_p |= 1ull << k;
    }
    hosts_write_json(c);
    return MP_OK;
}

/* Several hosts (--links tcp:PORT:HOSTS): the stages are started by someone else (srun, in
 * jobs/slurm/serve.sbatch) with the secret in their environment and this one's; the front end binds
 * its endpoints, waits up to 300 s for the ring, and tells liveness by heartbeats. MP_OK or MP_ERR. */
static int serve_start_hosts(serve_ctx_t *c, const model_cfg_t *cfg, const http_listen_t *listen)
{
    unsigned char secret[WIRE_SECRET_BYTES];
    char first[300], first2[300], last[300], confirm[300], report[300], trace[4200];
    const char *hex = getenv(SERVE_SECRET_ENV);
    if (mkdir(c->s->out, 0755) != 0 && errno != EEXIST) return MP_FAIL("--out %s: %s", c->s->out, strerror(errno));
    if (!hex) return MP_FAIL("--links tcp:...: the job's secret must be in %s (every process gets the same)", SERVE_SECRET_ENV);
    if (wire_secret_parse(hex, secret) != MP_OK || links_parse(&c->l, c->s->links, c->S) != MP_OK) return MP_ERR;
    links_ep(&c->l, LINK_IN, 0, 0, first, sizeof first);
    links_ep(&c->l, LINK_IN, 0, 1, first2, sizeof first2);
    links_ep(&c->l, LINK_IN, c->S, 0, last, sizeof last);
    links_ep(&c->l, LINK_CONFIRM, 0, 0, confirm, sizeof confirm);
    links_ep(&c->l, LINK_REPORT, 0, 0, report, sizeof report);
    links_bindable(last, sizeof last), links_bindable(confirm, sizeof confirm), links_bindable(report, sizeof report);
    snprintf(trace, sizeof trace, "%s/trace.json", c->s->out);
    const batcher_links_t bl = {first, last, confirm, report, trace, first2, 1000};
    if (batcher_start(&c->b, c->s->slots, c->S, cfg->seq_len, cfg->vocab, &bl, secret, 30000, 300000, hosts_check,
                      hosts_recover, c) != MP_OK ||
        ckpt_file_tokenizer(c->s->ckpt, c->s->tokenizer_dir, &c->tok) != MP_OK ||
        http_start(&c->http, &c->b, listen, cfg->seq_len, cfg->vocab, &c->tok) != MP_OK)
        return MP_ERR;
    printf("serving %s on http://%s:%d: %d stage(s) on other hosts (%s), %d slots\n", c->s->ckpt, c->l.host[0],
           c->http.port, c->S, c->s->links, c->s->slots);
    fflush(stdout);
    return hosts_write_json(c);
}

int serve_main(const run_opts_t *o, const serve_opts_t *s)
{
    http_listen_t listen;
    deck_t d;
    model_cfg_t cfg;
    if (s->standby < 0 || s->standby > 1) return MP_ERROR("--standby %d: 0 or 1 standby per stage", s->standby), 1;
    if (s->stages < 1 || s->stages > SERVE_MAX_STAGES) return MP_ERROR("--stages %d: must be in [1, %d]", s->stages, SERVE_MAX_STAGES), 1;
    if (s->slots < 1 || s->slots > 1024) return MP_ERROR("--slots %d: must be in [1, 1024]", s->slots), 1;
    if (serve_listen(s->listen, s->public, s->http_limits, &listen) != MP_OK || serve_deck(o, s->stages, &d, &cfg) != MP_OK) return 1;
    serve_ctx_t *c = calloc(1, sizeof *c);
    if (!c) return MP_ERROR("out of memory"), 1;
    c->S = s->stages, c->standby = s->standby, c->o = o, c->s = s;
    pthread_mutex_init(&c->mu, NULL);
    for (int st = 0; st < c->S; st++) c->pid[st] = c->spare[st] = -1, run_stage_chunks(&d, st, &c->l0[st], &c->nl[st]);
    signals_install();
    c->hosts = s->links && !strncmp(s->links, "tcp:", 4);
    int rc = c->hosts ? serve_start_hosts(c, &cfg, &listen) : serve_start(c, &cfg, &listen);
    while (rc == MP_OK && c->hosts && !signals_pending()) nanosleep(&(struct timespec){0, 100000000L}, NULL);
    while (rc == MP_OK && !c->hosts && !signals_pending()) { /* the batching thread fails over; standbys are kept here */
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
        pthread_mutex_lock(&c->mu);
        serve_reap(c);
        int missing = 0;
        for (int st = 0; st < c->S; st++) missing += c->standby && c->spare[st] <= 0;
        if (missing) serve_fill_standbys(c), serve_write_json(c);
        pthread_mutex_unlock(&c->mu);
    }
    http_stop(&c->http);
    batcher_stop(&c->b);
    serve_reap_all(c);
    if (rc == MP_OK) printf("serving stopped by signal %d\n", signals_pending());
    if (c->envp) {
        int k = 0;
        while (c->envp[k]) k++;
        free(c->envp[k - 1]); /* the secret's entry, the only one allocated */
        free(c->envp);
    }
    tok_close(&c->tok);
    free(c);
    return rc == MP_OK ? 0 : 1;
}

int serve_stage_main(const run_opts_t *o, const serve_opts_t *s)
{
    deck_t d;
    model_cfg_t cfg;
    stage_cfg_t sc;
    memset(&sc, 0, sizeof sc);
    if (s->standby == 1 && standby_arm() != MP_OK) return 1; /* a promotion sent while it loads is kept */
    const char *hex = getenv(SERVE_SECRET_ENV);
    if (wire_secret_parse(hex, sc.secret) != MP_OK) return 1;
    unsetenv(SERVE_SECRET_ENV);
    if (serve_deck(o, s->stages, &d, &cfg) != MP_OK) return 1;
    if (s->stage < 0 || s->stage >= s->stages || !s->links || s->slots < 1)
        return MP_ERROR("serve-stage needs --stage in [0, --stages), --slots and --links (it is started by serve)"), 2;
    if (s->standby < 0 || s->standby > 2) return MP_ERROR("serve-stage --standby %d: 0, 1 (a standby) or 2 (a primary with one)", s->standby), 2;
    static links_t l;
    char in[4200], out[4200], out2[4200], delta[4200], dbind[4200], confirm[4200], report[4200], hello[4200];
    const int k = s->stage, slot = s->slot >= 0 ? s->slot : s->standby == 1;
    if (slot > 1) return MP_ERROR("serve-stage --slot %d: 0 or 1", s->slot), 2;
    if (links_parse(&l, s->links, s->stages) != MP_OK) return 2;
    /* its own slot's input and deltas (bound as a primary); a standby's primary is the other slot */
    links_ep(&l, LINK_IN, k, slot, in, sizeof in);
    links_ep(&l, LINK_IN, k + 1, 0, out, sizeof out);
    links_ep(&l, LINK_IN, k + 1, 1, out2, sizeof out2);
    links_ep(&l, LINK_DELTA, k, 1 - slot, delta, sizeof delta);
    links_ep(&l, LINK_DELTA, k, slot, dbind, sizeof dbind);
    links_ep(&l, LINK_IN, k, 1 - slot, hello, sizeof hello);
    links_ep(&l, LINK_CONFIRM, 0, 0, confirm, sizeof confirm);
    links_ep(&l, LINK_REPORT, 0, 0, report, sizeof report);
    sc.ckpt = s->ckpt, sc.in = in, sc.out = out, sc.stage = s->stage, sc.stages = s->stages, sc.slots = s->slots;
    sc.delta_ep = delta, sc.confirm_ep = confirm, sc.report_ep = report, sc.hello_ep = hello, sc.slot = slot;
    links_bindable(in, sizeof in), links_bindable(dbind, sizeof dbind);
    if (l.tcp) /* several hosts (links.h): the next stage's standby too, heartbeats, sends that never wait */
        sc.out2 = k + 1 < s->stages ? out2 : NULL, sc.delta_bind = dbind, sc.heartbeat_ms = 50;
    sc.standby = s->standby == 1, sc.deltas = s->standby != 0; /* a promoted standby ships to its successor */
    run_stage_chunks(&d, s->stage, &sc.layer0, &sc.nlayers);
    kernels_set_threads(d.train.threads > 0 ? d.train.threads : 1);
    return stage_run(&cfg, &sc) == MP_OK ? 0 : 1;
}
