#!/usr/bin/env python3
"""Samples GPU 0's own power readings through NVML while a run goes on (validation/gpu/bringup.sh,
part gpt2): every --every seconds the unix time, the power draw (W) and the total-energy counter
(mJ), until the file --stop appears or --max seconds have passed. Writes --out as JSON:
{"status": "ok", "device", "samples": [[unix_s, watts, energy_mj], ...], "stopped_unix"} or
{"status": "unavailable", "why"} when there is no NVML or no GPU (the dry run). NVML through
ctypes, so nothing needs installing; pynvml is not required."""
import argparse
import ctypes
import json
import os
import time


def nvml():
    lib = ctypes.CDLL(os.environ.get("MP_NVML_LIB", "libnvidia-ml.so.1"))
    for name in ("nvmlInit_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetPowerUsage",
                 "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetName", "nvmlErrorString"):
        getattr(lib, name)
    lib.nvmlErrorString.restype = ctypes.c_char_p
    return lib


def call(lib, fn, *args):
    rc = getattr(lib, fn)(*args)
    if rc != 0:
        raise RuntimeError("%s: %s" % (fn, lib.nvmlErrorString(rc).decode()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop", required=True)
    ap.add_argument("--every", type=float, default=0.05)
    ap.add_argument("--max", type=float, default=300.0)
    a = ap.parse_args()
    res = {"status": "unavailable"}
    try:
        lib = nvml()
        call(lib, "nvmlInit_v2")
        h = ctypes.c_void_p()
        call(lib, "nvmlDeviceGetHandleByIndex_v2", 0, ctypes.byref(h))
        name = ctypes.create_string_buffer(96)
        call(lib, "nvmlDeviceGetName", h, name, 96)
        mw, mj = ctypes.c_uint(), ctypes.c_ulonglong()
        samples = []
        t_end = time.time() + a.max
        while not os.path.exists(a.stop) and time.time() < t_end:
            call(lib, "nvmlDeviceGetPowerUsage", h, ctypes.byref(mw))
            call(lib, "nvmlDeviceGetTotalEnergyConsumption", h, ctypes.byref(mj))
            samples.append([time.time(), mw.value / 1000.0, float(mj.value)])
            time.sleep(a.every)
        res = {"status": "ok", "device": name.value.decode(), "every_s": a.every, "samples": samples,
               "stopped_unix": time.time()}
    except (OSError, AttributeError, RuntimeError) as ex:
        res["why"] = "%s: %s" % (type(ex).__name__, ex)
    with open(a.out + ".tmp", "w") as f:
        json.dump(res, f)
    os.replace(a.out + ".tmp", a.out)
    print("nvml_sample: %s, %d samples%s" % (res["status"], len(res.get("samples", [])),
                                            (": " + res["why"]) if "why" in res else ""))


if __name__ == "__main__":
    main()
