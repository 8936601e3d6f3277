/* mindpipe: parse the command line and dispatch. The commands that need MPI (CMD_MPI, commands.c) run
 * with or without mpirun (singleton init); the others never initialise it. */
#include <malloc.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "check.h"
#include "commands.h"
#include "ckpt.h"
#include "data.h"
#include "deck.h"
#include "device.h"
#include "kernels.h"
#include "mpi_check.h"
#include "perf.h"
#include "plan.h"
#include "profile.h"
#include "schedule.h"
#include "selftest.h"
#include "eval.h"
#include "generate.h"
#include "serve.h"
#include "search.h"
#include "sim.h"
#include "swapsim.h"
#include "train.h"

#define MAX_SETS 256

typedef struct {
    run_opts_t run;
    char *sets[MAX_SETS];
    const char *text, *out, *ckpt, *subnet, *method, *prompt;
    unsigned long long request_id;
    int max_tokens, top_k, stages, slots, stage, standby, public, slot;
    const char *listen, *links, *http_limits;
    double temperature;
    int population, generations, seed_set;
    double mutation, max_params, max_flops;
    unsigned long long seed;
    double val_fraction;
    int threads, pp, m, v, list, swap;
    double alpha;
    const char *schedule;
    const char *positional;
    const char *device;
    int verbose;
    plan_cli_t plan;           /* mindpipe plan's own options */
} cli_t;

/* MP_OK, or MP_ERR after printing what is wrong with the arguments. */
static int cli_parse(cli_t *c, int argc, char **argv)
{
    memset(c, 0, sizeof *c);
    c->val_fraction = 0.05;
    c->alpha = -1.0;
    c->population = 8, c->generations = 4, c->mutation = 0.2;
    c->max_tokens = 64;
    c->stages = 1, c->slots = 8, c->stage = -1, c->slot = -1;
    const command_t *cmd = command_find(argv[1]);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (a[0] == '-' && cmd && !command_takes(cmd, a))
            return MP_FAIL("option '%s' does not apply to '%s' (mindpipe %s --help lists its options)", a, argv[1],
                           argv[1]);
        if ((!strcmp(a, "-c") || !strcmp(a, "--deck")) && has_val) c->run.deck_path = argv[++i];
        else if (!strcmp(a, "--set") && has_val) {
            if (c->run.nsets == MAX_SETS) return MP_FAIL("more than %d --set options", MAX_SETS);
            c->sets[c->run.nsets++] = argv[++i];
        } else if (!strcmp(a, "--out") && has_val) c->out = argv[++i];
        else if (!strcmp(a, "--resume") && has_val) c->run.resume = argv[++i];
        else if (!strcmp(a, "--ckpt") && has_val) c->ckpt = argv[++i];
        else if (!strcmp(a, "--subnet") && has_val) c->subnet = argv[++i];
        else if (!strcmp(a, "--method") && has_val) c->method = argv[++i];
        else if (!strcmp(a, "--population") && has_val) c->population = atoi(argv[++i]);
        else if (!strcmp(a, "--generations") && has_val) c->generations = atoi(argv[++i]);
        else if (!strcmp(a, "--mutation") && has_val) c->mutation = atof(argv[++i]);
        else if (!strcmp(a, "--max-params") && has_val) c->max_params = atof(argv[++i]);
        else if (!strcmp(a, "--max-flops") && has_val) c->max_flops = atof(argv[++i]);
        else if (!strcmp(a, "--seed") && has_val) c->seed = strtoull(argv[++i], NULL, 10), c->seed_set = 1;
        else if (!strcmp(a, "--text") && has_val) c->text = argv[++i];
        else if (!strcmp(a, "--prompt") && has_val) c->prompt = argv[++i];
        else if (!strcmp(a, "--max-tokens") && has_val) c->max_tokens = atoi(argv[++i]);
        else if (!strcmp(a, "--temperature") && has_val) c->temperature = atof(argv[++i]);
        else if (!strcmp(a, "--top-k") && has_val) c->top_k = atoi(argv[++i]);
        else if (!strcmp(a, "--request-id") && has_val) c->request_id = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--stages") && has_val) c->stages = atoi(argv[++i]);
        else if (!strcmp(a, "--slots") && has_val) c->slots = atoi(argv[++i]);
        else if (!strcmp(a, "--stage") && has_val) c->stage = atoi(argv[++i]);
        else if (!strcmp(a, "--standby") && has_val) c->standby = atoi(argv[++i]);
        else if (!strcmp(a, "--slot") && has_val) c->slot = atoi(argv[++i]);
        else if (!strcmp(a, "--listen") && has_val) c->listen = argv[++i];
        else if (!strcmp(a, "--links") && has_val) c->links = argv[++i];
        else if (!strcmp(a, "--public")) c->public = 1;
        else if (!strcmp(a, "--http-limits") && has_val) c->http_limits = argv[++i];
        else if (!strcmp(a, "--val-fraction") && has_val) c->val_fraction = atof(argv[++i]);
        else if (!strcmp(a, "--quiet")) c->run.quiet = 1;
        else if (!strcmp(a, "--restart")) c->run.restart = 1;
        else if (!strcmp(a, "--threads") && has_val) c->threads = atoi(argv[++i]);
        else if (!strcmp(a, "--schedule") && has_val) c->schedule = argv[++i];
        else if (!strcmp(a, "--pp") && has_val) c->pp = atoi(argv[++i]);
        else if (!strcmp(a, "--m") && has_val) c->m = atoi(argv[++i]);
        else if (!strcmp(a, "--v") && has_val) c->v = atoi(argv[++i]);
        else if (!strcmp(a, "--list")) c->list = 1;
        else if (!strcmp(a, "--swap")) c->swap = 1;
        else if (!strcmp(a, "--alpha") && has_val) c->alpha = atof(argv[++i]);
        else if (!strcmp(a, "--device") && has_val) c->device = argv[++i];
        else if (!strcmp(a, "--verbose")) c->verbose = 1;
        else if (!strcmp(a, "--ranks") && has_val) c->plan.ranks = atoi(argv[++i]);
        else if (!strcmp(a, "--layout") && has_val) c->plan.layout = argv[++i];
        else if (!strcmp(a, "--devices") && has_val) c->plan.devices = argv[++i];
        else if (!strcmp(a, "--profile") && has_val) c->plan.profile = argv[++i];
        else if (!strcmp(a, "--precision") && has_val) c->plan.precision = argv[++i];
        else if (!strcmp(a, "--top") && has_val) c->plan.top = atoi(argv[++i]);
        else if (!strcmp(a, "--json")) c->plan.json = 1;
        else if (!strcmp(a, "--objective") && has_val) c->plan.objective = argv[++i];
        else if (!strcmp(a, "--tokens") && has_val) c->plan.tokens = atof(argv[++i]);
        else if (!strcmp(a, "--deadline") && has_val) c->plan.deadline_h = atof(argv[++i]);
        else if (!strcmp(a, "--emit") && has_val) c->plan.emit = argv[++i];
        else if (!strcmp(a, "--nodes-of") && has_val) c->plan.per_node = atoi(argv[++i]);
        else if (a[0] != '-' && !c->positional && !strcmp(argv[1], "inspect")) c->positional = a;
        else if (a[0] != '-')
            return MP_FAIL("unexpected argument '%s' for '%s': %s (see mindpipe --help)", a, argv[1],
                           strcmp(argv[1], "inspect") ? "this command takes no file or directory without an option "
                                                        "(the run directory is --out DIR)"
                                                      : "inspect takes one checkpoint file");
        else return MP_FAIL("unknown or incomplete option '%s' for '%s' (see mindpipe --help)", a, argv[1]);
    }
    if (c->run.restart && c->run.resume)
        return MP_FAIL("--restart and --resume exclude each other: --resume continues the run in --out, --restart "
                       "starts a new one there");
    c->run.sets = c->sets;
    c->run.out_dir = c->out;
    return MP_OK;
}

/* `mindpipe sim`: the schedule simulator on one (kind, pp, m, v); exit 0 iff the schedule is valid. */
/* `mindpipe sim --swap`: docs/MEMORY.md's tables from the swap simulator's default costs (swapsim.h). */
static int cmd_sim_swap(const cli_t *c)
{
    if (c->alpha != -1.0 && !(c->alpha >= 0.0 && c->alpha <= 10.0)) return MP_ERROR("--alpha must be in [0, 10]"), 2;
    static const char *const names[] = {"pipeline (rank r = stage r of a pp = R pipeline)",
                                        "replicas (R data-parallel replicas of stage 0 of a pp = 4 pipeline)"};
    for (int l = 0; l < 2; l++) {
        swapsim_cfg_t cfg;
        swapsim_cfg_default(&cfg, l ? SWAPSIM_REPLICAS : SWAPSIM_PIPELINE, 2);
        if (c->alpha >= 0.0) cfg.alpha = c->alpha;
        printf("%s%s; m = %d, tf = %g ms, tb = %g ms, %g MB each way per micro-batch, %g GB/s per direction, "
               "alpha = %g (assumed)\n\n",
               l ? "\n" : "", names[l], cfg.m, 1e3 * cfg.tf, 1e3 * cfg.tb, cfg.bytes / 1e6, cfg.bw / 1e9, cfg.alpha);
        if (swapsim_table(stdout, &cfg) != MP_OK) return 1;
    }
    return 0;
}

static int cmd_sim(const cli_t *c)
{
    if (c->swap) return cmd_sim_swap(c);
    sched_kind_t kind;
    const int v = c->v > 0 ? c->v : 1;
    if (!c->schedule || sched_kind_parse(c->schedule, &kind) != MP_OK || c->pp < 1 || c->m < 1)
        return MP_ERROR("sim needs --schedule gpipe|1f1b|interleaved|2bw, --pp P >= 1 and --m M >= 1"), 2;
    sim_result_t r;
    int rc = sim_run(kind, c->pp, c->m, v, SIM_COST_TF, SIM_COST_TB, &r);
    if (rc != MP_OK) {
        printf("%s pp=%d m=%d v=%d: INVALID: %s\n", c->schedule, c->pp, c->m, v, r.error);
        return 1;
    }
    printf("%s pp=%d m=%d v=%d: valid (no deadlock, every send matched); cost model tb = 2 tf:\n", c->schedule, c->pp,
           c->m, v);
    printf("  makespan %.2f tf, busy %.2f tf per stage, bubble %.4f\n", r.makespan, r.busy, r.bubble);
    for (int s = 0; s < c->pp; s++) {
        printf("  stage %d: peak stashed micro-batches %d", s, r.peak_stash[s]);
        instr_list_t l;
        if (c->list && sched_build(&l, kind, s, c->pp, c->m, v) == MP_OK) {
            printf(" |");
            for (int i = 0; i < l.n; i++)
                l.ins[i].mb >= 0 ? printf(" %s(%d.%d)", op_names[l.ins[i].op], l.ins[i].mb, l.ins[i].chunk)
                                 : printf(" %s", op_names[l.ins[i].op]);
            sched_free(&l);
        }
        printf("\n");
    }
    return 0;
}

static int cmd_dispatch(const char *cmd, cli_t *c)
{
    if (!strcmp(cmd, "train")) {
        return train_main(&c->run);
    }
    if (!strcmp(cmd, "debug-grads")) {
        if (!c->run.deck_path || !c->out) return MP_ERROR("debug-grads needs -c DECK and --out FILE"), 2;
        return train_debug_grads(&c->run, c->out);
    }
    if (!strcmp(cmd, "prep")) {
        if (!c->text || !c->out) return MP_ERROR("prep needs --text FILE and --out DATA.h5"), 2;
        if (!(c->val_fraction > 0 && c->val_fraction < 0.5)) return MP_ERROR("--val-fraction must be in (0, 0.5)"), 2;
        return data_prep_text(c->text, c->out, c->val_fraction) == MP_OK ? 0 : 1;
    }
    if (!strcmp(cmd, "eval")) {
        if (!c->ckpt) return MP_ERROR("eval needs --ckpt CKPT.h5 (and -c DECK: the model and the data)"), 2;
        return eval_main(&c->run, c->ckpt, c->subnet);
    }
    if (!strcmp(cmd, "search")) {
        if (!c->ckpt || !c->out) return MP_ERROR("search needs -c DECK (the supernet's), --ckpt CKPT.h5 and --out DIR"), 2;
        if (c->method && strcmp(c->method, "evolution") && strcmp(c->method, "random"))
            return MP_ERROR("--method '%s': evolution or random", c->method), 2;
        search_cfg_t s = {c->ckpt, c->out, !c->method || !strcmp(c->method, "evolution"), c->population, c->generations,
                          c->mutation, c->max_params, c->max_flops, c->seed_set ? c->seed : 1};
        return search_main(&c->run, &s);
    }
    if (!strcmp(cmd, "export")) {
        if (!c->ckpt || !c->subnet || !c->out)
            return MP_ERROR("export needs -c DECK (the supernet's), --ckpt CKPT.h5, --subnet 0,2,1 and --out SUB.h5"), 2;
        return export_main(&c->run, c->ckpt, c->subnet, c->out);
    }
    if (!strcmp(cmd, "generate")) {
        if (!c->run.deck_path || !c->ckpt || !c->prompt)
            return MP_ERROR("generate needs -c DECK, --ckpt CKPT.h5 and --prompt TEXT"), 2;
        const generate_opts_t g = {c->ckpt, c->prompt, c->max_tokens, c->top_k, c->temperature,
                                   c->seed_set ? c->seed : 1, c->request_id};
        return generate_main(&c->run, &g);
    }
    if (!strcmp(cmd, "serve") || !strcmp(cmd, "serve-stage")) {
        if (!c->run.deck_path || !c->ckpt) return MP_ERROR("%s needs -c DECK and --ckpt CKPT.h5", cmd), 2;
        const serve_opts_t s = {c->ckpt, c->out ? c->out : "serve", c->listen ? c->listen : "127.0.0.1:8080", c->links,
                                c->stages, c->slots, c->stage, c->standby, c->public, c->slot, c->http_limits};
        return !strcmp(cmd, "serve") ? serve_main(&c->run, &s) : serve_stage_main(&c->run, &s);
    }
    if (!strcmp(cmd, "inspect")) {
        if (!c->positional) return MP_ERROR("inspect needs a checkpoint file"), 2;
        return ckpt_inspect(c->positional, stdout) == MP_OK ? 0 : 1;
    }
    if (!strcmp(cmd, "peak")) {
        kernels_set_threads(c->threads > 0 ? c->threads : 1);
        printf("%.1f\n", perf_sgemm_peak_gflops());
        return 0;
    }
    if (!strcmp(cmd, "sim")) return cmd_sim(c);
    if (!strcmp(cmd, "plan")) {
        if (!c->run.deck_path) return MP_ERROR("plan needs -c DECK"), 2;
        c->plan.deck_path = c->run.deck_path, c->plan.sets = c->run.sets, c->plan.nsets = c->run.nsets;
        c->plan.device = c->device;
        return plan_main(&c->plan);
    }
    if (!strcmp(cmd, "profile")) {
        if (!c->run.deck_path || !c->out) return MP_ERROR("profile needs -c DECK and --out PROF.json"), 2;
        return profile_main(&c->run, c->out);
    }
    if (!strcmp(cmd, "selftest")) return selftest_run(c->device ? c->device : "cuda", c->verbose);
    if (!strcmp(cmd, "deck-reference")) {
        deck_print_reference(stdout);
        return 0;
    }
    MP_ERROR("unknown command '%s'", cmd);
    commands_usage(stderr);
    return 2;
}

static void on_init_timeout(int sig)
{
    (void)sig;
    static const char msg[] = "mindpipe: fatal: MPI_Init did not complete within MINDPIPE_INIT_TIMEOUT seconds "
                              "(default 600): a rank of the job did not start, died or stopped before it; exiting\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

/* MPI for the commands that need it (CMD_MPI): the others never call MPI_Init, so they open none
 * of UCX's transports (its TCP one listens on every interface) and run where MPI cannot start; their
 * fatal errors end in exit(1), not MPI_Abort (check.h). Returns with MPI up, or ends the process. */
static void mpi_start(int *argc, char ***argv)
{
    int provided, rank;
    /* MPI_Init waits for every rank of the job; one that never starts (or stops) would hold it
     * forever, before any deck deadline exists: an alarm bounds it (MINDPIPE_INIT_TIMEOUT seconds,
     * default 600; 0 = none) */
    const char *it = getenv("MINDPIPE_INIT_TIMEOUT");
    const long init_timeout = it && *it ? strtol(it, NULL, 10) : 600;
    signal(SIGALRM, on_init_timeout);
    if (init_timeout > 0) alarm((unsigned)init_timeout);
    /* MPI takes a temporary buffer from malloc for every all-reduce (the dp gradient buckets, cut
     * to 16 MiB by dp.c): blocks up to glibc's 32 MiB ceiling come from the heap, and freed heap
     * stays with the process, so a step's buffers are not faulted in again page by page
     * (measured: 0.3 against 3.6 GB/s, dp.c). Tuning only: a libc without them changes no result. */
#ifdef M_MMAP_THRESHOLD
    (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
    alarm(0);
    signal(SIGALRM, SIG_DFL);
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    mpi_check_init(rank);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        commands_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const command_t *cmd = command_find(argv[1]);
    if (!cmd && strcmp(argv[1], "--version")) {
        fprintf(stderr, "mindpipe: unknown command '%s'\n", argv[1]);
        commands_usage(stderr);
        return 2;
    }
    for (int i = 2; cmd && i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            command_usage(stdout, cmd);
            return 0;
        }
    if (!strcmp(argv[1], "--version")) {
        printf("mindpipe %s\n", PACKAGE_VERSION);
        return 0;
    }
    cli_t cli;
    if (cli_parse(&cli, argc, argv) != MP_OK) return 2;
    const int with_mpi = cmd && (cmd->flags & CMD_MPI);
    /* a command without MPI that a launcher started N times would run N times over (N servers, N
     * writers of one file) without knowing it: Hydra and Slurm's PMI say how many they started */
    const char *pmi_size = getenv("PMI_SIZE");
    if (!with_mpi && pmi_size && atoi(pmi_size) > 1)
        return MP_ERROR("'%s' runs in one process and without MPI: start it without mpiexec/srun -n (the "
                        "launcher started %s)", argv[1], pmi_size), 2;
    if (with_mpi) mpi_start(&argc, &argv);
    device_report_init();
    int rc = cmd_dispatch(argv[1], &cli);
    if (with_mpi) MPI_CHECK(MPI_Finalize());
    return rc;
}
