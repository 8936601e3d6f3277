/* `mindpipe serve` and `mindpipe serve-stage` (serve.h). */
#include "serve.h"

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

#include "batcher.h"
#include "check.h"
#include "deck.h"
#include "http.h"
#include "kernels.h"
#include "publish.h"
#include "signals.h"
#include "stage.h"

#define SERVE_SECRET_ENV "MINDPIPE_SERVE_SECRET"
#define SERVE_MAX_STAGES 64
#define SERVE_MAX_SETS 260

/* The front end's one context: what it started and what became of it. */
typedef struct {
    int S;
    pid_t pid[SERVE_MAX_STAGES];
    int l0[SERVE_MAX_STAGES], nl[SERVE_MAX_STAGES];
    pthread_mutex_t mu;           /* pid and why: reaped by the main loop or by the batching thread */
    char why[256];                /* the first stage death, "" while all live */
    batcher_t b;
    http_t http;
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
    *cfg = (model_cfg_t){d->model.layers, d->model.dim, d->model.heads, d->model.seq_len, d->model.vocab,
                         d->model.mlp_ratio, d->model.shapes.n ? d->model.shapes.shape : NULL, NULL, NULL, 0};
    return MP_OK;
}

static void link_name(char *buf, size_t n, const char *dir, int k) { snprintf(buf, n, "ipc://%s/link%d", dir, k); }

/* Reaps stages that ended; the first death's description, or NULL while all live. */
static const char *serve_check(void *arg)
{
    serve_ctx_t *c = arg;
    pthread_mutex_lock(&c->mu);
    for (int s = 0; s < c->S; s++) {
        int st;
        if (c->pid[s] <= 0 || waitpid(c->pid[s], &st, WNOHANG) != c->pid[s]) continue;
        if (!c->why[0]) {
            if (WIFSIGNALED(st)) snprintf(c->why, sizeof c->why, "stage %d (pid %d) died of signal %d", s, (int)c->pid[s], WTERMSIG(st));
            else snprintf(c->why, sizeof c->why, "stage %d (pid %d) exited with status %d", s, (int)c->pid[s], WEXITSTATUS(st));
        }
        c->pid[s] = -1;
    }
    const char *why = c->why[0] ? c->why : NULL;
    pthread_mutex_unlock(&c->mu);
    return why;
}

/* The child's side of a spawn: a process of its own, without the MPI launcher's environment (a
 * stage initialises MPI as a singleton), then this program as `serve-stage`. Never returns. */
static void spawn_child(char **argv, const char *secret)
{
    extern char **environ;
    for (char **e = environ; *e;) /* unsetenv shifts the array: test the same slot again */
        if (!strncmp(*e, "PMI_", 4) || !strncmp(*e, "HYDRA_", 6) || !strncmp(*e, "MPIR_", 5)) {
            char name[128];
            const size_t k = strcspn(*e, "=");
            snprintf(name, sizeof name, "%.*s", (int)(k < sizeof name ? k : sizeof name - 1), *e);
            unsetenv(name);
        } else e++;
    setenv(SERVE_SECRET_ENV, secret, 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "mindpipe: error: exec of a serving stage failed: %s\n", strerror(errno));
    _exit(127);
}

static int spawn_stage(serve_ctx_t *c, const run_opts_t *o, const serve_opts_t *s, int stage, const char *links,
                       const char *secret)
{
    char *argv[2 * SERVE_MAX_SETS + 20], sbuf[16], slots[16];
    int n = 0;
    snprintf(sbuf, sizeof sbuf, "%d", stage);
    snprintf(slots, sizeof slots, "%d", s->slots);
    argv[n++] = "mindpipe", argv[n++] = "serve-stage";
    if (o->deck_path) argv[n++] = "-c", argv[n++] = (char *)o->deck_path;
    for (int i = 0; i < o->nsets; i++) argv[n++] = "--set", argv[n++] = o->sets[i];
    argv[n++] = "--ckpt", argv[n++] = (char *)s->ckpt, argv[n++] = "--stage", argv[n++] = sbuf;
    char st[16];
    snprintf(st, sizeof st, "%d", s->stages);
    argv[n++] = "--stages", argv[n++] = st, argv[n++] = "--slots", argv[n++] = slots;
    argv[n++] = "--links", argv[n++] = (char *)links, argv[n] = NULL;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) return MP_FAIL("fork of serving stage %d failed: %s", stage, strerror(errno));
    if (pid == 0) spawn_child(argv, secret);
    c->pid[stage] = pid;
    return MP_OK;
}

/* DIR/serve.json: every process, its role, stage, layers, pid and address. */
static int serve_write_json(const serve_ctx_t *c, const char *out, const char *links)
{
    char path[4096], text[16384], ep[4200];
    int n = snprintf(text, sizeof text, "{\"front_end\": {\"pid\": %d, \"address\": \"http://127.0.0.1:%d\"},\n \"stages\": [",
                     (int)getpid(), c->http.port);
    for (int s = 0; s < c->S && n < (int)sizeof text; s++) {
        link_name(ep, sizeof ep, links, s);
        n += snprintf(text + n, sizeof text - (size_t)n,
                      "%s\n  {\"role\": \"primary\", \"stage\": %d, \"layers\": [%d, %d], \"pid\": %d, \"address\": \"%s\"}",
                      s ? "," : "", s, c->l0[s], c->l0[s] + c->nl[s], (int)c->pid[s], ep);
    }
    if (n < (int)sizeof text) n += snprintf(text + n, sizeof text - (size_t)n, "\n ]}\n");
    if (n >= (int)sizeof text) return MP_FAIL("serve.json: too many stages to describe");
    snprintf(path, sizeof path, "%s/serve.json", out);
    return publish_text(path, text);
}

/* Port of --listen [127.0.0.1|localhost]:PORT; anything but loopback is refused (not built). */
static int serve_port(const char *listen, int *port)
{
    const char *colon = strrchr(listen, ':');
    char *end;
    const long p = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || colon[1] == 0 || *end || p < 0 || p > 65535)
        return MP_FAIL("--listen %s: give HOST:PORT with a port in [0, 65535] (0: any free port)", listen);
    const size_t hl = (size_t)(colon - listen);
    if (!((hl == 9 && !strncmp(listen, "127.0.0.1", 9)) || (hl == 9 && !strncmp(listen, "localhost", 9))))
        return MP_FAIL("--listen %s: serving listens on loopback only (127.0.0.1); binding beyond it, with an access "
                       "token, is not built yet", listen);
    *port = (int)p;
    return MP_OK;
}

/* SIGTERM to every stage still running, up to 5 s for them to end, then SIGKILL. */
static void serve_reap_all(serve_ctx_t *c)
{
    for (int s = 0; s < c->S; s++)
        if (c->pid[s] > 0) kill(c->pid[s], SIGTERM);
    for (int i = 0; i < 50; i++) {
        int left = 0;
        serve_check(c);
        for (int s = 0; s < c->S; s++) left += c->pid[s] > 0;
        if (!left) return;
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
    }
    for (int s = 0; s < c->S; s++)
        if (c->pid[s] > 0) kill(c->pid[s], SIGKILL), waitpid(c->pid[s], NULL, 0), c->pid[s] = -1;
}

/* DIR and DIR/sock (0700: only this user reaches the stages' sockets), the links' directory in
 * links (n bytes). MP_OK or MP_ERR. */
static int serve_dirs(const char *out, char *links, size_t n)
{
    if (mkdir(out, 0755) != 0 && errno != EEXIST) return MP_FAIL("--out %s: %s", out, strerror(errno));
    if ((size_t)snprintf(links, n, "%s/sock", out) >= n) return MP_FAIL("--out %s: the path is too long", out);
    if (mkdir(links, 0700) != 0 && errno != EEXIST) return MP_FAIL("%s: %s", links, strerror(errno));
    if (chmod(links, 0700) != 0) return MP_FAIL("%s: %s", links, strerror(errno));
    /* a Unix socket's path has at most 107 bytes */
    if (strlen(links) + 12 > 107) return MP_FAIL("--out %s: too long a path for the stages' sockets (at most 95 bytes)", out);
    return MP_OK;
}

static int serve_start(serve_ctx_t *c, const run_opts_t *o, const serve_opts_t *s, const model_cfg_t *cfg, int port)
{
    char links[4096], first[4200], last[4200], hex[2 * WIRE_SECRET_BYTES + 1];
    unsigned char secret[WIRE_SECRET_BYTES];
    if (serve_dirs(s->out, links, sizeof links) != MP_OK || wire_secret_new(secret, hex) != MP_OK) return MP_ERR;
    for (int k = 0; k <= c->S; k++) { /* stale sockets of an earlier server in this directory */
        char p[4200];
        snprintf(p, sizeof p, "%s/link%d", links, k);
        unlink(p);
    }
    for (int st = 0; st < c->S; st++)
        if (spawn_stage(c, o, s, st, links, hex) != MP_OK) return MP_ERR;
    link_name(first, sizeof first, links, 0);
    link_name(last, sizeof last, links, c->S);
    if (batcher_start(&c->b, s->slots, c->S, cfg->seq_len, cfg->vocab, first, last, secret, 30000, 300000, serve_check, c) !=
        MP_OK)
        return MP_ERR;
    if (http_start(&c->http, &c->b, port, cfg->seq_len, cfg->vocab) != MP_OK) return MP_ERR;
    if (serve_write_json(c, s->out, links) != MP_OK) return MP_ERR;
    printf("serving %s on http://127.0.0.1:%d: %d stage(s) of layers", s->ckpt, c->http.port, c->S);
    for (int st = 0; st < c->S; st++) printf(" %s[%d, %d)", st ? "| " : "", c->l0[st], c->l0[st] + c->nl[st]);
    printf(", %d slots; %s/serve.json; SIGTERM stops it\n", s->slots, s->out);
    fflush(stdout);
    return MP_OK;
}

int serve_main(const run_opts_t *o, const serve_opts_t *s)
{
    int port;
    deck_t d;
    model_cfg_t cfg;
    if (s->standby) return MP_ERROR("--standby %d: standbys are not built yet (ARCHITECTURE.md §7)", s->standby), 1;
    if (s->stages < 1 || s->stages > SERVE_MAX_STAGES) return MP_ERROR("--stages %d: must be in [1, %d]", s->stages, SERVE_MAX_STAGES), 1;
    if (s->slots < 1 || s->slots > 1024) return MP_ERROR("--slots %d: must be in [1, 1024]", s->slots), 1;
    if (serve_port(s->listen, &port) != MP_OK || serve_deck(o, s->stages, &d, &cfg) != MP_OK) return 1;
    serve_ctx_t *c = calloc(1, sizeof *c);
    if (!c) return MP_ERROR("out of memory"), 1;
    c->S = s->stages;
    pthread_mutex_init(&c->mu, NULL);
    for (int st = 0; st < c->S; st++) run_stage_chunks(&d, st, &c->l0[st], &c->nl[st]);
    signals_install();
    int rc = serve_start(c, o, s, &cfg, port);
    while (rc == MP_OK && !signals_pending()) {
        nanosleep(&(struct timespec){0, 100000000L}, NULL);
        const char *why = serve_check(c);
        if (why) batcher_mark_down(&c->b, why);
    }
    http_stop(&c->http);
    batcher_stop(&c->b);
    serve_reap_all(c);
    if (rc == MP_OK) printf("serving stopped by signal %d\n", signals_pending());
    free(c);
    return rc == MP_OK ? 0 : 1;
}

int serve_stage_main(const run_opts_t *o, const serve_opts_t *s)
{
    deck_t d;
    model_cfg_t cfg;
    stage_cfg_t sc;
    memset(&sc, 0, sizeof sc);
    const char *hex = getenv(SERVE_SECRET_ENV);
    if (wire_secret_parse(hex, sc.secret) != MP_OK) return 1;
    unsetenv(SERVE_SECRET_ENV);
    if (serve_deck(o, s->stages, &d, &cfg) != MP_OK) return 1;
    if (s->stage < 0 || s->stage >= s->stages || !s->links || s->slots < 1)
        return MP_ERROR("serve-stage needs --stage in [0, --stages), --slots and --links (it is started by serve)"), 2;
    char in[4200], out[4200];
    link_name(in, sizeof in, s->links, s->stage);
    link_name(out, sizeof out, s->links, s->stage + 1);
    sc.ckpt = s->ckpt, sc.in = in, sc.out = out, sc.stage = s->stage, sc.stages = s->stages, sc.slots = s->slots;
    run_stage_chunks(&d, s->stage, &sc.layer0, &sc.nlayers);
    kernels_set_threads(d.train.threads > 0 ? d.train.threads : 1);
    return stage_run(&cfg, &sc) == MP_OK ? 0 : 1;
}
