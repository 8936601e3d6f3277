/* GPU energy through NVML (src/obs/nvml.h, src/obs/energy.h) against a fake libnvidia-ml
 * (fake_nvml.c, built beside this test), loaded through MP_NVML_LIB: bus ids in CUDA's and NVML's
 * spellings compare equal; each GPU is counted by the lowest rank of its node that names it; the
 * counter's reading is the fake's known advance; the errors (library missing, a function missing,
 * init failing, no such GPU, a counter the GPU lacks) are reported in NVML's words and leave nothing
 * open; energy.json's text. One process: the whole path over MPI_COMM_WORLD of one rank.
 *
 * Under mpiexec -n 3 (validation/test_obs.sh) it checks the counting across real ranks instead:
 * ranks 0 and 1 name one GPU (in two spellings), rank 2 another; then rank 2 cannot load NVML and
 * every rank must report rank 2's reason. */
#include <dlfcn.h>
#include <libgen.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "energy.h"
#include "mpi_check.h"
#include "nvml.h"
#include "tap.h"

static char fake[4096], fake_noenergy[4096];
static int (*fake_live)(void);

/* The fakes beside this program (Makefile.am builds them into validation/unit/). */
static int find_fakes(const char *argv0)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", argv0);
    const char *d = dirname(dir);
    snprintf(fake, sizeof fake, "%s/libfake_nvml.so", d);
    snprintf(fake_noenergy, sizeof fake_noenergy, "%s/libfake_nvml_noenergy.so", d);
    /* held open for the whole test, so the fake's counters and its count of live inits outlast
     * nvml_close's dlclose */
    void *h = dlopen(fake, RTLD_NOW | RTLD_LOCAL);
    void *f = h ? dlsym(h, "fake_nvml_live") : NULL;
    if (!f) return MP_ERR;
    memcpy(&fake_live, &f, sizeof f);
    return MP_OK;
}

static void test_bus_ids(void)
{
    char a[NVML_BUS_ID_LEN], b[NVML_BUS_ID_LEN], c[NVML_BUS_ID_LEN];
    int ra = nvml_bus_id_normalise("0000:3B:00.0", a, sizeof a);
    int rb = nvml_bus_id_normalise("00000000:3b:00.0", b, sizeof b);
    tap_ok(ra == MP_OK && rb == MP_OK && !strcmp(a, "00000000:3b:00.0") && !strcmp(a, b),
           "bus ids: CUDA's 0000:3B:00.0 and NVML's 00000000:3b:00.0 both read 00000000:3b:00.0 (got %s, %s)", a, b);
    int rc = nvml_bus_id_normalise("GPU-1234", c, sizeof c);
    tap_ok(rc == MP_ERR && !strcmp(c, "GPU-1234"), "bus ids: another form is refused and kept as given");
}

static void test_counting(void)
{
    /* ranks of one node: 0 and 1 share a GPU, 2 has another, 3 none, 4 shares 2's */
    char ids[5][NVML_BUS_ID_LEN] = {"00000000:01:00.0", "00000000:01:00.0", "00000000:02:00.0", "",
                                    "00000000:02:00.0"};
    const int want[5] = {1, 0, 1, 0, 0};
    int good = 1;
    for (int i = 0; i < 5; i++) good &= energy_gpu_counts(&ids[0][0], 5, i) == want[i];
    tap_ok(good, "each GPU counted once, by the lowest rank naming it; a rank without a GPU counts none");
}

/* nvml_open against lib with the environment variable env set (NULL: none); why it failed in why. */
static int open_with(const char *lib, const char *env, const char *bus, char *why, size_t n)
{
    nvml_t nv;
    setenv("MP_NVML_LIB", lib, 1);
    if (env) setenv(env, "1", 1);
    why[0] = 0;
    int rc = nvml_open(&nv, bus, why, n);
    if (rc == MP_OK) nvml_close(&nv);
    if (env) unsetenv(env);
    return rc;
}

static void test_errors(void)
{
    char why[256];
    int rc = open_with("/nonexistent/libnvidia-ml.so.1", NULL, "0000:01:00.0", why, sizeof why);
    tap_ok(rc == MP_ERR && strstr(why, "NVML not loadable (/nonexistent/libnvidia-ml.so.1, from MP_NVML_LIB)"),
           "library missing: refused naming it (%s)", why);
    rc = open_with(fake_noenergy, NULL, "0000:01:00.0", why, sizeof why);
    tap_ok(rc == MP_ERR && strstr(why, "has no nvmlDeviceGetTotalEnergyConsumption"),
           "function missing: refused naming it (%s)", why);
    rc = open_with(fake, "FAKE_NVML_INIT_FAIL", "0000:01:00.0", why, sizeof why);
    tap_ok(rc == MP_ERR && strstr(why, "nvmlInit_v2 failed: Driver Not Loaded"), "init failing: NVML's words (%s)", why);
    rc = open_with(fake, NULL, "0000:ff:00.0", why, sizeof why);
    tap_ok(rc == MP_ERR && strstr(why, "nvmlDeviceGetHandleByPciBusId_v2(0000:ff:00.0) failed: Not Found"),
           "no GPU at the bus id: NVML's words (%s)", why);
    tap_ok(fake_live() == 0, "every failed open left NVML shut down (live inits %d)", fake_live());
}

static void test_reading(void)
{
    nvml_t nv;
    char why[256] = "";
    unsigned long long a = 0, b = 0;
    setenv("MP_NVML_LIB", fake, 1);
    int rc = nvml_open(&nv, "00000000:04:00.0", why, sizeof why);
    tap_ok(rc == MP_OK && fake_live() == 1, "open: the fake loaded and initialised once (%s)", why);
    if (rc != MP_OK) return;
    int r1 = nvml_energy_mj(&nv, &a, why, sizeof why), r2 = nvml_energy_mj(&nv, &b, why, sizeof why);
    tap_ok(r1 == MP_OK && r2 == MP_OK && a >= 5000000ull && (a - 5000000ull) % 1250 == 0 && b - a == 1250,
           "reading: the counter of bus 4 reads 5e6 + k x 1250 mJ (%llu, then %llu)", a, b);
    setenv("FAKE_NVML_ENERGY_FAIL", "1", 1);
    rc = nvml_energy_mj(&nv, &a, why, sizeof why);
    unsetenv("FAKE_NVML_ENERGY_FAIL");
    tap_ok(rc == MP_ERR && strstr(why, "Not Supported") && strstr(why, "Volta"),
           "a counter the GPU lacks: NVML's words and the Volta note (%s)", why);
    nvml_close(&nv);
    tap_ok(fake_live() == 0 && nv.lib == NULL, "close: NVML shut down and unloaded");
}

/* energy_start .. energy_finish on one rank with bus (NULL: none). */
static void run_one(const char *lib, const char *env, const char *bus, energy_use_t *u)
{
    energy_t e;
    setenv("MP_NVML_LIB", lib, 1);
    if (env) setenv(env, "1", 1);
    energy_start(&e, bus);
    energy_finish(&e, MPI_COMM_WORLD, u);
    if (env) unsetenv(env);
}

/* The text without its final newline, for a TAP line. */
static const char *one_line(char *text)
{
    size_t n = strlen(text);
    if (n && text[n - 1] == '\n') text[n - 1] = 0;
    return text;
}

static void test_run(void)
{
    energy_use_t u;
    char text[1024];
    run_one(fake, NULL, "0000:05:00.0", &u);
    tap_ok(u.gpu_wanted && u.gpu_measured && u.gpus == 1 && u.gpu_j == 1.5 && u.host_j >= 0 &&
               energy_total_j(&u) == u.host_j + 1.5 && fake_live() == 0,
           "a run on bus 5: 1.5 J from NVML on 1 GPU added to the host's %g J; NVML closed after", u.host_j);
    int rc = energy_json(&u, 2.0, 3, 300, 400.0, text, sizeof text);
    tap_ok(rc == MP_OK && strstr(text, "\"gpu_j\": 1.5,") && strstr(text, "\"gpu_source\": \"nvml\"") &&
               strstr(text, "\"gpus\": 1,") && strstr(text, "\"steps\": 3,") && strstr(text, "\"tokens\": 300,"),
           "energy.json with the GPU part: %s", one_line(text));
    tap_ok(energy_json(&u, 2.0, 3, 300, 400.0, text, 64) == MP_ERR, "energy.json: a buffer too small is refused");

    run_one(fake, NULL, NULL, &u);
    tap_ok(!u.gpu_wanted && !u.gpu_measured && u.gpus == 0 && u.gpu_j == 0 && energy_total_j(&u) == u.host_j,
           "no GPU named (cpu, emu): the host part alone");
    rc = energy_json(&u, 2.0, 0, 0, 400.0, text, sizeof text);
    tap_ok(rc == MP_OK && strstr(text, "\"gpu_j\": null") && strstr(text, "\"gpu_source\": null") &&
               strstr(text, "\"gpus\": 0,") && strstr(text, "\"j_per_token\": null"),
           "energy.json without a GPU or tokens: nulls (%s)", one_line(text));

    run_one("/nonexistent/libnvidia-ml.so.1", NULL, "0000:05:00.0", &u);
    tap_ok(u.gpu_wanted && !u.gpu_measured && u.gpus == 0 && !strncmp(u.gpu_why, "rank 0: NVML not loadable", 25),
           "cuda without NVML: not measured, the host part alone, with the reason (%s)", u.gpu_why);
    run_one(fake, "FAKE_NVML_ENERGY_FAIL", "0000:05:00.0", &u);
    tap_ok(u.gpu_wanted && !u.gpu_measured && strstr(u.gpu_why, "Not Supported"),
           "a GPU without the counter: not measured (%s)", u.gpu_why);
}

/* mpiexec -n 3: the counting across ranks (every rank on one node here). */
static int test_ranks(int rank, int size)
{
    static const char *const bus[3] = {"0000:01:00.0", "00000000:01:00.0", "0000:02:00.0"};
    energy_use_t u;
    int bad = 0;
    run_one(fake, NULL, bus[rank % 3], &u);
    const double want = size == 3 ? 0.5 + 0.75 : NAN;
    bad += !(u.gpu_measured && u.gpus == 2 && u.gpu_j == want);
    if (rank == 0)
        printf("# 3 ranks, 2 GPUs: gpus %d, gpu_j %.17g (want 2, 1.25)\n", u.gpus, u.gpu_j);
    run_one(rank == 2 ? "/nonexistent/libnvidia-ml.so.1" : fake, NULL, bus[rank % 3], &u);
    bad += !(!u.gpu_measured && u.gpus == 0 && !strncmp(u.gpu_why, "rank 2: NVML not loadable", 25));
    if (rank == 0) printf("# rank 2 without NVML: %s\n", u.gpu_why);
    int all = 0;
    MPI_CHECK(MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    if (rank == 0) printf("%s energy across %d ranks: each GPU once, the failing rank's reason on every rank\n",
                          all ? "FAIL" : "PASS", size);
    return all ? 1 : 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    mpi_check_init(0);
    int rank = 0, size = 1, rc = 0;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    if (find_fakes(argv[0]) != MP_OK) {
        const char *e = dlerror();
        if (rank == 0) printf("not ok 1 - the fake NVML %s does not load: %s\n1..1\n", fake, e ? e : "?");
        MPI_Finalize();
        return 1;
    }
    if (size > 1) {
        rc = test_ranks(rank, size);
        MPI_Finalize();
        return rc;
    }
    test_bus_ids();
    test_counting();
    test_errors();
    test_reading();
    test_run();
    MPI_Finalize();
    return tap_done();
}
