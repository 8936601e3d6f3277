/* inputs/devices.ini and its parser (src/plan/devices.h): every kind the issue names loads with the
 * figures of its datasheet, and a bad file is refused naming what is wrong (an unknown kind, an
 * unknown key, a missing key, a curve that does not increase, a value that is not a number). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "devices.h"
#include "tap.h"

static const char *write_tmp(char *path, size_t n, const char *text)
{
    snprintf(path, n, "/tmp/mp_test_devices_%d.ini", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return path;
}

#define GOOD_KEYS                                                                                          \
    "peak_bf16 = 1e12\npeak_tf32 = 1e12\npeak_fp32 = 1e12\nmem_bw = 1e9\nmemory = 1e9\nidle_w = 1\nbusy_w = 2\n" \
    "per_node = 4\nintra_bw = 1e9\nintra_lat = 1e-6\ninter_bw = 1e8\ninter_lat = 1e-5\nhost_bw = 1e9\n"

int main(void)
{
    const char *path = devices_default_path();
    dev_kind_t d;
    static const char *const kinds[] = {"a100-40g", "a100-80g", "h100-80g", "h200", "cpu"};
    for (int i = 0; i < 5; i++) tap_ok(devices_load(path, kinds[i], &d) == MP_OK, "%s loads from %s", kinds[i], path);
    int ok = devices_load(path, "a100-80g", &d) == MP_OK;
    tap_ok(ok && d.peak[DEV_PREC_BF16] == 312e12 && d.peak[DEV_PREC_TF32] == 156e12 && d.peak[DEV_PREC_FP32] == 19.5e12,
           "a100-80g: 312 / 156 / 19.5 TFLOP/s");
    tap_ok(ok && d.mem_bw == 2039e9 && d.mem_bytes == 80e9, "a100-80g: 2039 GB/s HBM2e, 80 GB");
    tap_ok(ok && d.per_node == 8 && d.intra.bw == 300e9 && d.inter.bw == 25e9,
           "a100-80g: DGX A100, NVLink 300 GB/s each way, 8 x HDR = 25 GB/s per GPU");
    ok = devices_load(path, "h100-80g", &d) == MP_OK;
    tap_ok(ok && d.peak[DEV_PREC_BF16] == 989.4e12 && d.intra.bw == 450e9 && d.inter.bw == 50e9 && d.busy_w == 700,
           "h100-80g: 989.4 TFLOP/s bf16, NVLink 450 GB/s each way, 8 x NDR = 50 GB/s per GPU, 700 W");
    ok = devices_load(path, "cpu", &d) == MP_OK;
    tap_ok(ok && d.node_cores == 2 && d.neff >= 2 && dev_eff(&d, 1e4) > dev_eff(&d, 32), "cpu: 2 cores, a rising curve");
    tap_ok(devices_load(path, "tpu-v9", &d) == MP_ERR, "an unknown kind is refused");
    char tmp[128];
    const char *t = write_tmp(tmp, sizeof tmp, "[x]\n" GOOD_KEYS "eff_curve = 10:0.5,100:0.9\n");
    tap_ok(t && devices_load(t, "x", &d) == MP_OK && d.neff == 2 && d.eff[1] == 0.9, "a minimal kind with a curve loads");
    t = write_tmp(tmp, sizeof tmp, "[x]\n" GOOD_KEYS "colour = blue\n");
    tap_ok(t && devices_load(t, "x", &d) == MP_ERR, "an unknown key is refused");
    t = write_tmp(tmp, sizeof tmp, "[x]\npeak_bf16 = 1e12\n");
    tap_ok(t && devices_load(t, "x", &d) == MP_ERR, "a kind missing keys is refused");
    t = write_tmp(tmp, sizeof tmp, "[x]\n" GOOD_KEYS "eff_curve = 100:0.5,10:0.9\n");
    tap_ok(t && devices_load(t, "x", &d) == MP_ERR, "a curve whose sizes do not increase is refused");
    t = write_tmp(tmp, sizeof tmp, "[x]\n" GOOD_KEYS "eff_curve = 10:0.5,100\n");
    tap_ok(t && devices_load(t, "x", &d) == MP_ERR, "a curve point without its efficiency is refused");
    t = write_tmp(tmp, sizeof tmp, "[x]\n" GOOD_KEYS "node_cores = two\n");
    tap_ok(t && devices_load(t, "x", &d) == MP_ERR, "a value that is not a number is refused");
    if (t) remove(t);
    return tap_done();
}
