#!/usr/bin/env python3
"""DistServe's placement question for kvasir: given the per-instance rates measured by
bench/disagg_bench.py (1 prefill + 1 decode instance), predict TTFT, TPOT and goodput for N prefill
+ M decode instances at an arrival rate and prompt mix.

Model (a discrete-event simulation, Poisson arrivals):
  prefill instance   FCFS, one prompt at a time: L * s_per_token, then the KV transfer (L * bytes
                     per token / measured rate)
  decode instance    continuous batching: a step takes a + b * (sequences in the batch) and gives
                     each sequence one token; a request joins at the first step after its KV
                     arrived (that step gives its first token); placed on the least loaded
Calibration: the prefill instance's tokens/s alone on one core at a short and a long prompt
(disagg_bench.py measures them with `kvasir bench`; else the pair run's prefill time, which
includes queueing), the transfer from the prefill instance's /metrics at the lowest rate; a and b fitted to (TPOT, mean batch) of the two lowest
rates (mean batch by Little's law: rate x output tokens x TPOT). The prediction is then checked
against every measured 1+1 point (runs as long as the measured ones, median of 25 arrival seeds),
the ones not used for the fit included; predictions for other shapes are steady state (2,000
requests).

  bench/disagg_sim.py [--summary bench/out/disagg/summary.json] [--prefill N --decode M --rate R]
"""
import argparse
import heapq
import json
import random
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "disagg"


def calibrate(summary):
    runs = sorted((r for r in summary["runs"] if r["config"] == "disagg"), key=lambda r: r["rate"])
    if not runs:
        raise SystemExit("no disagg runs in the summary: run bench/disagg_bench.py first")
    low = runs[0]
    lens = json.loads((OUT / f"disagg-{low['rate']}.json").read_text())
    lens = (lens["runs"][0] if "runs" in lens else lens)["input_lens"]
    tokens = low.get("prompt_tokens_prefilled") or sum(lens)
    # The prefill instance's speed: measured alone on one core at a short and a long length
    # (disagg_bench.py's `kvasir bench` step), else the pair run's prefill time (which includes
    # the queueing of overlapping prompts, so it is pessimistic).
    rates = summary.get("prefill_tps_one_core")
    c = {"prefill_tps": sorted((int(k), v) for k, v in rates.items()) if rates else None,
         "s_per_token": low["prefill_s"] / tokens if tokens else 0.0,
         "bytes_per_token": low["kv_bytes"] / tokens if tokens else 0.0,
         "transfer_bps": low["kv_gbps"] * 1e9 if low.get("kv_gbps") == low.get("kv_gbps") else 1e9,
         "output_tokens": 128, "input_lens": lens}
    pts = [(r["rate"] * 128 * r["tpot_mean"], r["tpot_mean"]) for r in runs[:2]]
    if len(pts) == 2 and pts[1][0] != pts[0][0]:
        b = (pts[1][1] - pts[0][1]) / (pts[1][0] - pts[0][0])
        b = max(b, 0.0)
        a = pts[0][1] - b * pts[0][0]
    else:
        a, b = pts[0][1], 0.0
    c["step_a"], c["step_b"] = max(a, 1e-4), b
    return c


def prefill_seconds(c, L):
    pts = c["prefill_tps"]
    if not pts:
        return L * c["s_per_token"]
    if len(pts) == 1 or L <= pts[0][0]:
        return L / pts[0][1]
    (l0, r0), (l1, r1) = pts[0], pts[-1]
    tps = r0 + (r1 - r0) * (min(L, l1) - l0) / (l1 - l0)  # tokens/s falls with the length (attention)
    return L / tps


def simulate(c, n_prefill, n_decode, rate, n_requests=2000, seed=1, ttft_slo=2.0, tpot_slo=0.05):
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    for _ in range(n_requests):
        t += rng.expovariate(rate)
        arrivals.append((t, rng.choice(c["input_lens"])))
    # Prefill: FCFS on the instance free first.
    free_at = [0.0] * n_prefill
    ready = []  # (time the KV is on a decode instance, request index)
    for i, (at, L) in enumerate(arrivals):
        k = min(range(n_prefill), key=lambda j: free_at[j])
        start = max(at, free_at[k])
        done = start + prefill_seconds(c, L)
        free_at[k] = done
        ready.append((done + L * c["bytes_per_token"] / c["transfer_bps"], i))
    ready.sort()
    # Decode: each instance steps while it has sequences; requests go to the least loaded.
    insts = [{"t": 0.0, "active": []} for _ in range(n_decode)]
    first, finish = {}, {}
    pending = list(ready)
    pending.reverse()

    def step(inst):
        dur = c["step_a"] + c["step_b"] * len(inst["active"])
        inst["t"] += dur
        still = []
        for req in inst["active"]:
            idx, left = req
            if idx not in first:
                first[idx] = inst["t"]
            left -= 1
            if left == 0:
                finish[idx] = inst["t"]
            else:
                still.append((idx, left))
        inst["active"] = still

    while pending or any(i["active"] for i in insts):
        # Advance the instance that is earliest in time; admit what arrived by then.
        busy = [i for i in insts if i["active"]]
        now = min(i["t"] for i in busy) if busy else pending[-1][0]
        while pending and pending[-1][0] <= now:
            when, idx = pending.pop()
            inst = min(insts, key=lambda i: (len(i["active"]), i["t"]))
            if not inst["active"]:
                inst["t"] = max(inst["t"], when)
            inst["active"].append((idx, c["output_tokens"]))
        busy = [i for i in insts if i["active"]]
        if not busy:
            continue
        step(min(busy, key=lambda i: i["t"]))
    ttft = [first[i] - arrivals[i][0] for i in range(n_requests)]
    tpot = [(finish[i] - first[i]) / (c["output_tokens"] - 1) for i in range(n_requests)]
    span = max(finish.values()) - arrivals[0][0]
    good = sum(1 for i in range(n_requests) if ttft[i] <= ttft_slo and tpot[i] <= tpot_slo)
    q = lambda xs, p: statistics.quantiles(xs, n=100)[p - 1]
    return {"ttft_p50": q(ttft, 50), "ttft_p99": q(ttft, 99), "tpot_p50": q(tpot, 50), "tpot_p99": q(tpot, 99),
            "goodput_rps": good / span, "good_fraction": good / n_requests}


def main():
    global OUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--summary", default=str(OUT / "summary.json"))  # the run files are read beside it
    ap.add_argument("--prefill", type=int)
    ap.add_argument("--decode", type=int)
    ap.add_argument("--rate", type=float)
    a = ap.parse_args()
    OUT = Path(a.summary).parent
    summary = json.loads(Path(a.summary).read_text())
    c = calibrate(summary)
    pre = (", ".join(f"{v:.0f} tok/s at {k}" for k, v in c["prefill_tps"]) + " (one core, alone)") if c["prefill_tps"] \
        else f"{1 / c['s_per_token']:.0f} tok/s (the pair run's)"
    print(f"calibration: prefill {pre}, KV {c['bytes_per_token'] / 1024:.1f} KiB/token at "
          f"{c['transfer_bps'] / 1e9:.2f} GB/s, decode step {1e3 * c['step_a']:.1f} ms + {1e3 * c['step_b']:.2f} ms/seq")
    print("\ncheck against the measured 1P+1D runs:")
    print("| rate | TTFT P50 meas / sim | TTFT P99 meas / sim | TPOT P50 ms meas / sim | goodput meas / sim |")
    print("|---|---|---|---|---|")
    for r in sorted((r for r in summary["runs"] if r["config"] == "disagg"), key=lambda r: r["rate"]):
        # As long as the measured run (a short run is not in steady state), the median of 25 seeds.
        runs = [simulate(c, 1, 1, r["rate"], n_requests=r["n"], seed=k) for k in range(25)]
        s = {key: statistics.median(x[key] for x in runs) for key in runs[0]}
        print(f"| {r['rate']} | {r['ttft_p50']:.2f} / {s['ttft_p50']:.2f} | {r['ttft_p99']:.2f} / {s['ttft_p99']:.2f} | "
              f"{1e3 * r['tpot_p50']:.1f} / {1e3 * s['tpot_p50']:.1f} | {r['goodput_rps']:.3f} / {s['goodput_rps']:.3f} |")
    if a.rate:
        shapes = [(a.prefill, a.decode)] if a.prefill and a.decode else [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (1, 3)]
        print(f"\npredicted at {a.rate} req/s:")
        print("| prefill | decode | TTFT P50 / P99 s | TPOT P50 / P99 ms | goodput req/s (share) | per instance |")
        print("|---|---|---|---|---|---|")
        for n, m in shapes:
            s = simulate(c, n, m, a.rate)
            print(f"| {n} | {m} | {s['ttft_p50']:.2f} / {s['ttft_p99']:.2f} | {1e3 * s['tpot_p50']:.1f} / "
                  f"{1e3 * s['tpot_p99']:.1f} | {s['goodput_rps']:.3f} ({100 * s['good_fraction']:.0f}%) | "
                  f"{s['goodput_rps'] / (n + m):.3f} |")


if __name__ == "__main__":
    main()
