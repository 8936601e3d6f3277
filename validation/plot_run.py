#!/usr/bin/env python3
"""Draws a run directory (ARCHITECTURE.md §9) as PNGs, with matplotlib (Debian's python3-matplotlib).

  /usr/bin/python3 validation/plot_run.py RUN_DIR [--out DIR] [--step N]

Reads RUN_DIR/metrics.jsonl (required), RUN_DIR/deck.ini (for tokens = step x train.batch x
model.seq_len, when the metrics hold no `tokens`) and RUN_DIR/trace.json, and writes into DIR
(default RUN_DIR/plots):

  loss.png        loss and val_loss against optimizer steps (bottom axis) and tokens (top axis)
  throughput.png  tokens/s and MFU against steps
  memory.png      peak device memory per pipeline stage: at the last logged step, split into
                  activations and the rest (weights, gradients, optimizer state), with the plan;
                  and each stage's peak against steps
  timeline.png    one step of trace.json, one row per rank (and one per copy engine), labelled with
                  the rank's stage and grid coordinates; spans coloured by kind; time in ms

--step N picks the timeline's step in trace.json's numbering (0-based: its spans carry "step": N;
metrics.jsonl calls the same step N + 1). By default: the last step every rank finished (its
optimizer span) without an evaluation or a checkpoint in it, else the last step every rank finished.

Exit 0 when every plot was written or skipped with a printed reason (e.g. no val_loss, no trace.json);
exit 2 naming the file when a required file is missing or unreadable."""
import argparse
import configparser
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.patches import Patch  # noqa: E402

DPI = 100
MIB = 2.0 ** 20

# Span kinds of the timeline: (legend label, trace span names, colour). Names not listed are drawn
# as "other" and named in the legend.
KINDS = [
    ("forward", {"forward"}, "#4285f4"),
    ("backward", {"backward"}, "#34a853"),
    ("backward B (input gradient)", {"backward B"}, "#0b8043"),
    ("backward W (weight gradient)", {"backward W"}, "#a8dab5"),
    ("recompute (memory.policy)", {"recompute"}, "#b5e08a"),
    ("send wait", {"send activation", "send gradient"}, "#fde293"),
    ("receive wait", {"receive activation", "receive gradient"}, "#f2a7a0"),
    ("pipeline flush", {"pipeline flush", "gradients final"}, "#9e9e9e"),
    ("gradient all-reduce wait", {"gradient all-reduce wait"}, "#795548"),
    ("optimizer", {"optimizer"}, "#fb8c00"),
    ("offload / prefetch / balance moves",
     {"offload", "prefetch", "evict", "reclaim", "accept", "return", "offload copy", "prefetch copy"}, "#00acc1"),
    ("evaluation / checkpoint", {"evaluation", "checkpoint"}, "#8e24aa"),
]
OTHER_COLOUR = "#424242"


class RunError(Exception):
    """A required file of the run directory is missing or unreadable: exit 2 with this message."""


def read_metrics(path):
    if not os.path.isfile(path):
        raise RunError(f"{path}: no such file (a run directory written by `mindpipe train` holds one)")
    rows = []
    with open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise RunError(f"{path}:{i}: not a JSON object ({e})") from None
    if not rows or any("step" not in r for r in rows):
        raise RunError(f"{path}: holds no logged steps (one JSON object with a `step` per line)")
    return rows


def read_deck(path):
    """The resolved deck as {section: {key: str}}, or None when the file is absent."""
    if not os.path.isfile(path):
        return None
    cp = configparser.ConfigParser(inline_comment_prefixes=("#", ";"), interpolation=None)
    try:
        cp.read(path)
    except configparser.Error as e:
        raise RunError(f"{path}: not a readable deck ({e})") from None
    return {s: dict(cp[s]) for s in cp.sections()}


def deck_int(deck, section, key, default=None):
    try:
        return int(deck[section][key])
    except (KeyError, TypeError, ValueError):
        return default


def tokens_of(rows, deck, deck_path):
    """Tokens seen after each logged step: the metrics' `tokens`, else step x batch x seq_len."""
    if all("tokens" in r for r in rows):
        return [r["tokens"] for r in rows]
    if deck is None:
        raise RunError(f"{deck_path}: no such file (needed for tokens = step x train.batch x model.seq_len: "
                       "the metrics hold no `tokens`)")
    batch, seq = deck_int(deck, "train", "batch"), deck_int(deck, "model", "seq_len")
    if not batch or not seq:
        raise RunError(f"{deck_path}: no [train] batch or [model] seq_len (needed for the tokens axis)")
    return [r["step"] * batch * seq for r in rows]


def series(rows, key):
    pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def save(fig, out, name, written):
    path = os.path.join(out, name)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    written.append(path)


def skip(name, why):
    print(f"plot_run.py: skipping {name}: {why}")


def plot_loss(rows, tokens, title, out, written):
    steps, loss = series(rows, "loss")
    if not steps:
        return skip("loss.png", "metrics.jsonl holds no `loss`")
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, loss, marker=".", label="loss (training)")
    vs, vl = series(rows, "val_loss")
    if vs:
        ax.plot(vs, vl, marker="o", linestyle="--", label="val_loss")
    else:
        print("plot_run.py: loss.png has no val_loss: the run never evaluated (train.eval_every = 0)")
    per_step = {r["step"]: t for r, t in zip(rows, tokens)}
    s_all = sorted(per_step)
    t_all = [per_step[s] for s in s_all]
    # the top axis maps steps to tokens; linear between logged steps, extrapolated at the ends
    ratio = t_all[-1] / s_all[-1] if s_all[-1] else 1.0

    def to_tokens(x):
        return x * ratio

    def to_steps(x):
        return x / ratio if ratio else x
    top = ax.secondary_xaxis("top", functions=(to_tokens, to_steps))
    top.set_xlabel("tokens")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    save(fig, out, "loss.png", written)


def plot_throughput(rows, title, out, written):
    ts, tps = series(rows, "tokens_per_s")
    ms, mfu = series(rows, "mfu")
    if not ts and not ms:
        return skip("throughput.png", "metrics.jsonl holds no `tokens_per_s` or `mfu`")
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 4.6), sharex=True)
    a1.plot(ts, tps, marker=".", color="#4285f4")
    a1.set_ylabel("tokens/s")
    a2.plot(ms, [100.0 * m for m in mfu], marker=".", color="#fb8c00")
    a2.set_ylabel("MFU (% of peak)")
    a2.set_xlabel("optimizer step (each point: the interval since the previous logged step)")
    for a in (a1, a2):
        a.grid(alpha=0.3)
        a.set_ylim(bottom=0)
    a1.set_title(title, fontsize=9)
    fig.tight_layout()
    save(fig, out, "throughput.png", written)


def plot_memory(rows, title, out, written):
    with_peak = [r for r in rows if isinstance(r.get("peak_mem_bytes"), list) and r["peak_mem_bytes"]]
    if not with_peak:
        return skip("memory.png", "metrics.jsonl holds no per-stage `peak_mem_bytes`")
    last = with_peak[-1]
    peak = [b / MIB for b in last["peak_mem_bytes"]]
    n = len(peak)
    act = [b / MIB for b in last.get("activation_peak_bytes", [])]
    act = act if len(act) == n else [0.0] * n
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [1, 1.4]})
    x = list(range(n))
    rest = [p - a for p, a in zip(peak, act)]
    a1.bar(x, rest, color="#90a4ae", label="weights, gradients, optimizer state")
    a1.bar(x, act, bottom=rest, color="#4285f4", label="activations (stashes, workspace, buffers)")
    plan = last.get("planned_mem_bytes")
    if isinstance(plan, list) and len(plan) == n:
        a1.scatter(x, [b / MIB for b in plan], marker="_", s=900, color="black", zorder=3, label="plan")
    a1.set_xticks(x, [f"stage {s}" for s in x])
    a1.set_ylabel("peak device memory (MiB)")
    a1.set_title(f"per stage at step {last['step']}", fontsize=9)
    a1.set_ylim(0, 1.45 * max(max(peak), max(plan) / MIB if isinstance(plan, list) and plan else 0))
    a1.legend(fontsize=7, loc="upper right", markerscale=0.3)
    for s in range(n):
        pts = [(r["step"], r["peak_mem_bytes"][s] / MIB) for r in with_peak if len(r["peak_mem_bytes"]) == n]
        a2.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=f"stage {s}")
    a2.set_xlabel("optimizer step")
    a2.set_ylabel("peak device memory (MiB)")
    a2.set_ylim(bottom=0)
    a2.set_title("peak per stage over the run", fontsize=9)
    a2.legend(fontsize=7)
    for a in (a1, a2):
        a.grid(alpha=0.3, axis="y")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save(fig, out, "memory.png", written)


def read_trace(path):
    try:
        with open(path) as f:
            return json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RunError(f"{path}: not a readable Chrome trace with `traceEvents` ({e})") from None


def row_label(name, tid, thread):
    """'rank 3: dp1 tp0 pp2 sp0' -> 'rank 3 · stage 2\\ndp1 tp0 sp0' (other names as given)."""
    m = re.match(r"rank (\d+): (.*)$", name or "")
    if not m:
        label = name or "?"
    else:
        coords = dict(re.findall(r"([a-z]+)(\d+)", m.group(2)))
        others = " ".join(f"{k}{v}" for k, v in coords.items() if k != "pp")
        stage = f" · stage {coords['pp']}" if "pp" in coords else ""
        label = f"rank {m.group(1)}{stage}\n{others}"
    return label + (f"\n{thread}" if tid else "")


def pick_step(spans, ranks, want, path):
    by_step = {}
    for e in spans:
        by_step.setdefault(e["args"].get("step"), []).append(e)
    done = sorted(s for s, ev in by_step.items() if s is not None and s >= 0 and
                  {e["pid"] for e in ev if e["name"] == "optimizer"} >= set(ranks))
    if want is not None:
        if want not in by_step:
            have = sorted(s for s in by_step if s is not None and s >= 0)
            raise RunError(f"{path}: no spans of step {want} (0-based; the trace holds steps "
                           f"{have[0] if have else '-'}..{have[-1] if have else '-'})")
        return want, by_step[want], ""
    if not done:
        return None, [], "no step that every rank finished (no optimizer span on every rank)"
    plain = [s for s in done if not any(e["name"] in ("evaluation", "checkpoint") for e in by_step[s])]
    s = plain[-1] if plain else done[-1]
    return s, by_step[s], ""


def plot_timeline(trace_path, want, title, out, written):
    if not os.path.isfile(trace_path):
        if want is not None:
            raise RunError(f"{trace_path}: no such file (--step asks for the timeline)")
        return skip("timeline.png", f"{trace_path} is absent. `mindpipe train` always records the timeline "
                    "(there is no deck key to turn it on or off) and writes trace.json when the run ends or stops "
                    "on a signal; a run that failed, was killed, or ran `mindpipe` without `train` has none. "
                    "Finish the run (`mindpipe train ... --resume auto`) to get one.")
    ev = read_trace(trace_path)
    pname = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
    porder = {e["pid"]: e["args"]["sort_index"] for e in ev
              if e.get("ph") == "M" and e.get("name") == "process_sort_index"}
    tname = {(e["pid"], e.get("tid", 0)): e["args"]["name"] for e in ev
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in ev if e.get("ph") == "X" and isinstance(e.get("args"), dict)]
    if not spans:
        return skip("timeline.png", f"{trace_path} holds no spans")
    ranks = sorted({e["pid"] for e in spans})
    step, sel, why = pick_step(spans, ranks, want, trace_path)
    if step is None:
        return skip("timeline.png", f"{trace_path}: {why}")
    rows = sorted({(e["pid"], e.get("tid", 0)) for e in sel}, key=lambda r: (porder.get(r[0], r[0]), r[1]))
    t0 = min(e["ts"] for e in sel)
    t1 = max(e["ts"] + e["dur"] for e in sel)
    width_ms = max((t1 - t0) / 1e3, 1e-3)
    kind_of = {}
    for i, (_, names, _) in enumerate(KINDS):
        for nm in names:
            kind_of[nm] = i
    fig, ax = plt.subplots(figsize=(11, 1.3 + 0.55 * len(rows)))
    used, others = set(), set()
    # longest first, so a span nested in another (recompute inside a backward) is drawn on top
    for e in sorted(sel, key=lambda e: -e["dur"]):
        y = rows.index((e["pid"], e.get("tid", 0)))
        k = kind_of.get(e["name"])
        colour = KINDS[k][2] if k is not None else OTHER_COLOUR
        if k is None:
            others.add(e["name"])
        else:
            used.add(k)
        x, w = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
        ax.barh(y, w, left=x, height=0.7, color=colour, edgecolor="black", linewidth=0.3)
        mb = e["args"].get("mb")
        if mb is not None and e["name"] in ("forward", "backward", "backward B", "backward W") and w > 0.018 * width_ms:
            ax.text(x + w / 2, y, str(mb), ha="center", va="center", fontsize=6, color="white")
    ax.set_yticks(range(len(rows)),
                  [row_label(pname.get(p, f"rank {p}"), t, tname.get((p, t), f"thread {t}")) for p, t in rows],
                  fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, width_ms)
    ax.set_xlabel("time since the step's first span (ms); numbers: micro-batch")
    ax.grid(alpha=0.3, axis="x")
    handles = [Patch(color=KINDS[k][2], label=KINDS[k][0]) for k in sorted(used)]
    if others:
        handles.append(Patch(color=OTHER_COLOUR, label="other: " + ", ".join(sorted(others))))
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title(f"{title}\nstep {step} of trace.json (metrics step {step + 1}), {width_ms:.1f} ms", fontsize=9)
    fig.tight_layout()
    save(fig, out, "timeline.png", written)
    print(f"plot_run.py: timeline.png: step {step}, {len(rows)} rows, {len(sel)} spans, {width_ms:.1f} ms")


def run_title(run, deck):
    """'RUN: L2 C32 T32, 2 ranks: pp2, 1f1b, batch 8 / micro-batch 4' from the resolved deck."""
    name = os.path.basename(os.path.normpath(run))
    if deck is None:
        return name
    g = lambda s, k: deck_int(deck, s, k)  # noqa: E731
    layout = " ".join(f"{k}{g('parallel', k)}" for k in ("dp", "tp", "pp", "sp") if (g("parallel", k) or 1) > 1)
    sched = deck.get("parallel", {}).get("schedule", "")
    return (f"{name}: L{g('model', 'layers')} C{g('model', 'dim')} T{g('model', 'seq_len')}, "
            f"{layout or 'one rank'}{', ' + sched if 'pp' in layout else ''}, "
            f"batch {g('train', 'batch')} / micro-batch {g('train', 'micro_batch')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", metavar="RUN_DIR")
    ap.add_argument("--out", metavar="DIR", help="where the PNGs go (default RUN_DIR/plots)")
    ap.add_argument("--step", type=int, metavar="N", help="the timeline's step (trace.json's 0-based numbering)")
    a = ap.parse_args()
    try:
        if not os.path.isdir(a.run):
            raise RunError(f"{a.run}: not a directory (give a run directory: `mindpipe train --out RUN_DIR`)")
        rows = read_metrics(os.path.join(a.run, "metrics.jsonl"))
        deck_path = os.path.join(a.run, "deck.ini")
        deck = read_deck(deck_path)
        tokens = tokens_of(rows, deck, deck_path)
        out = a.out or os.path.join(a.run, "plots")
        os.makedirs(out, exist_ok=True)
        title = run_title(a.run, deck)
        written = []
        plot_loss(rows, tokens, title, out, written)
        plot_throughput(rows, title, out, written)
        plot_memory(rows, title, out, written)
        plot_timeline(os.path.join(a.run, "trace.json"), a.step, title, out, written)
    except RunError as e:
        print(f"plot_run.py: {e}", file=sys.stderr)
        return 2
    for p in written:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
