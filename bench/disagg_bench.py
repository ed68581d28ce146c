#!/usr/bin/env python3
"""Prefill/decode disaggregation against one colocated instance, on this machine's cores.

Workload (issue 40): 30% long prompts (~2,000 tokens), 70% chat turns (~128 tokens), 128 output
tokens each, Poisson arrivals at several rates. Configurations, interleaved rate by rate:
  colocated      one `kvasir serve` on every core (default flags)
  colocated-tpot the same with --tpot-target 50
  disagg         a prefill instance pinned to core 0 + a decode instance pinned to core 1, behind
                 `kvasir router`
Reports P50/P99 TTFT and TPOT, goodput (requests/s with TTFT <= 2 s and TPOT <= 50 ms), and for
disagg the KV transfer rate (bytes over the time frames were in flight), the transfer's time as a
share of the prefill time, and the share it added after the prefills ended (the rest overlapped
them; from the instances' /metrics).
Writes bench/out/disagg/<config>-<rate>.json (loadgen's detailed JSON) and summary.json, which
bench/disagg_sim.py reads.

  bench/disagg_bench.py [--model M.gguf] [--rates 0.2,0.4,0.8] [--num-prompts 40] [--bin build/bin/kvasir]
                        [--token-ids] [--out DIR]
  bench/disagg_bench.py --transfer-only [--num-prompts 5]   # the KV transfer alone, one prompt at a time
"""
import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "disagg"
TTFT_SLO, TPOT_SLO = 2.0, 0.050

WORDS = ("the river stone lantern garden winter harbor violet meadow copper silent morning letter window "
         "mountain engine station village market bridge thunder orchard candle shadow").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process on {port} exited")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"no health on {port}")


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k.split("{")[0]] = float(v)
        return out


def workload(path, n, seed, token_ids=False):
    """JSONL of n prompts: 30% ~2,000 tokens, 70% ~128. Text (about 1.3 tokens per word with the
    default model's vocabulary), or token ids of exact lengths (--token-ids: synthetic models,
    whose random vocabularies cut words into many pieces)."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            long = rng.random() < 0.3
            if token_ids:
                ids = [rng.randint(100, 30000) for _ in range(rng.randint(1800, 1900) if long else rng.randint(112, 144))]
                f.write(json.dumps({"prompt": ids, "output_len": 128}) + "\n")
                continue
            words = rng.randint(1400, 1650) if long else rng.randint(80, 110)
            text = " ".join(rng.choice(WORDS) for _ in range(words))
            f.write(json.dumps({"prompt": f"Request {i}: {text}. Summary:", "output_len": 128}) + "\n")


class Config:
    def __init__(self, name, binary, model, threads):
        self.name, self.bin, self.model, self.threads = name, binary, model, threads
        self.procs, self.logs = [], []

    def spawn(self, args, cpus):
        log = open(OUT / f"{self.name}-{len(self.procs)}.log", "wb")
        p = subprocess.Popen(["taskset", "-c", cpus, self.bin, *args], stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        self.logs.append(log)
        return p

    def start(self):
        all_cpus = f"0-{self.threads - 1}"
        common = ["-m", self.model, "--max-seqs", "32"]
        if self.name.startswith("colocated"):
            self.port = free_port()
            extra = ["--tpot-target", "50"] if self.name == "colocated-tpot" else []
            wait_healthy(self.port, self.spawn(["serve", *common, "--port", str(self.port), "-t", str(self.threads),
                                                *extra], all_cpus))
            self.prefill_port = None
        else:
            self.prefill_port, self.decode_port, self.port = free_port(), free_port(), free_port()
            wait_healthy(self.prefill_port, self.spawn(["serve", *common, "--port", str(self.prefill_port), "-t", "1",
                                                        "--role", "prefill"], "0"))
            wait_healthy(self.decode_port, self.spawn(["serve", *common, "--port", str(self.decode_port), "-t", "1",
                                                       "--role", "decode", "--kv-listen", "127.0.0.1:0",
                                                       "--kv-transfer-timeout", "30000"], "1"))
            wait_healthy(self.port, self.spawn(["router", "--port", str(self.port),
                                                "--prefill", f"http://127.0.0.1:{self.prefill_port}",
                                                "--decode", f"http://127.0.0.1:{self.decode_port}"], all_cpus))

    def stop(self):
        for p in reversed(self.procs):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in self.logs:
            log.close()
        self.procs, self.logs = [], []


def prefill_rates(binary, model, lengths=(128, 1900)):
    """Prefill tokens/s of one instance on one core (the pair's prefill instance), per prompt length:
    what bench/disagg_sim.py models the prefill instance with."""
    out = subprocess.run(["taskset", "-c", "0", binary, "bench", "-m", model, "-p", ",".join(map(str, lengths)),
                          "-n", "0", "-t", "1", "-r", "1", "--json"], check=True, capture_output=True, text=True).stdout
    return {str(int(r["test"][2:])): r["tokens_per_s"] for r in json.loads(out) if r["test"].startswith("pp")}


def transfer_only(binary, model, n, seed):
    """The pair sharing every core, n prompts of ~1,500 tokens one after another: per prompt the KV
    bytes, the rate while frames were in flight, the transfer's time and what it added after the
    prefill ended, each as a share of the prefill time (the prefill instance's /metrics)."""
    cfg = Config("transfer", binary, model, 1)
    all_cpus = f"0-{min(2, os.cpu_count() or 2) - 1}"
    cfg.prefill_port, cfg.decode_port, cfg.port = free_port(), free_port(), free_port()
    common = ["-m", model]
    wait_healthy(cfg.prefill_port, cfg.spawn(["serve", *common, "--port", str(cfg.prefill_port), "--role", "prefill"], all_cpus))
    wait_healthy(cfg.decode_port, cfg.spawn(["serve", *common, "--port", str(cfg.decode_port), "--role", "decode",
                                             "--kv-listen", "127.0.0.1:0", "--kv-transfer-timeout", "30000"], all_cpus))
    wait_healthy(cfg.port, cfg.spawn(["router", "--port", str(cfg.port), "--prefill", f"http://127.0.0.1:{cfg.prefill_port}",
                                      "--decode", f"http://127.0.0.1:{cfg.decode_port}"], all_cpus))
    rng = random.Random(seed)
    rows = []
    try:
        for i in range(n):
            before = metrics(cfg.prefill_port)
            text = " ".join(rng.choice(WORDS) for _ in range(1150))
            body = json.dumps({"prompt": f"Prompt {i}: {text}", "max_tokens": 1}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{cfg.port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
            after = metrics(cfg.prefill_port)
            d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
            xfer, tail = d.get("kvasir:kv_push_transfer_seconds_total", 0), d.get("kvasir:kv_push_tail_seconds_total", 0)
            pre, nbytes = d.get("kvasir:kv_push_prefill_seconds_total", 0), d.get("kvasir:kv_push_bytes_total", 0)
            row = {"bytes": nbytes, "gbps": nbytes / xfer / 1e9 if xfer else float("nan"), "prefill_ms": 1e3 * pre,
                   "transfer_ms": 1e3 * xfer, "tail_ms": 1e3 * tail}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        cfg.stop()
    print("| prompt | MB | GB/s in flight | prefill ms | transfer ms (share) | added after prefill ms (share) |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        pre = r["prefill_ms"] or float("nan")
        print(f"| {i} | {r['bytes'] / 1e6:.1f} | {r['gbps']:.2f} | {r['prefill_ms']:.0f} | {r['transfer_ms']:.1f} "
              f"({100 * r['transfer_ms'] / pre:.1f}%) | {r['tail_ms']:.1f} ({100 * r['tail_ms'] / pre:.2f}%) |")


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(run, duration):
    ok = [i for i, e in enumerate(run["errors"]) if not e]
    ttft = [run["ttfts"][i] for i in ok]
    tpot = [statistics.mean(run["itls"][i]) for i in ok if run["itls"][i]]
    good = sum(1 for i in ok if run["ttfts"][i] <= TTFT_SLO and run["itls"][i]
               and statistics.mean(run["itls"][i]) <= TPOT_SLO)
    return {"n": len(run["errors"]), "errors": len(run["errors"]) - len(ok),
            "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99),
            "tpot_p50": pct(tpot, 50), "tpot_p99": pct(tpot, 99), "tpot_mean": statistics.mean(tpot) if tpot else 0,
            "goodput_rps": good / duration, "good_fraction": good / max(1, len(run["errors"])),
            "duration_s": duration}


def main():
    global OUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin" / "kvasir"))
    ap.add_argument("--rates", default="0.2,0.4,0.8")
    ap.add_argument("--num-prompts", type=int, default=40)
    ap.add_argument("--configs", default="colocated,colocated-tpot,disagg")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--token-ids", action="store_true", help="token-id prompts of exact lengths (synthetic models)")
    ap.add_argument("--out", default=str(OUT), help="where the JSON files go")
    ap.add_argument("--calibrate-only", action="store_true", help="only measure the prefill rates into OUT/summary.json")
    ap.add_argument("--transfer-only", action="store_true", help="only measure the KV transfer, one prompt at a time")
    a = ap.parse_args()
    OUT = Path(a.out)
    OUT.mkdir(parents=True, exist_ok=True)
    if a.transfer_only:
        transfer_only(a.bin, a.model, a.num_prompts, a.seed)
        return 0
    threads = min(2, os.cpu_count() or 2)
    prompts = OUT / "workload.jsonl"
    workload(prompts, a.num_prompts, a.seed, a.token_ids)
    summary = {"model": Path(a.model).name, "num_prompts": a.num_prompts, "slo": {"ttft_s": TTFT_SLO, "tpot_s": TPOT_SLO},
               "prefill_tps_one_core": prefill_rates(a.bin, a.model), "runs": []}
    if a.calibrate_only:  # add the prefill rates to an earlier run's summary
        old = json.loads((OUT / "summary.json").read_text())
        old["prefill_tps_one_core"] = summary["prefill_tps_one_core"]
        (OUT / "summary.json").write_text(json.dumps(old, indent=1))
        return 0
    for rate in [float(r) for r in a.rates.split(",")]:
        for name in a.configs.split(","):
            cfg = Config(name, a.bin, a.model, threads)
            cfg.start()
            try:
                before = metrics(cfg.prefill_port) if cfg.prefill_port else {}
                result = OUT / f"{name}-{rate}.json"
                t0 = time.time()
                subprocess.run([a.bin, "loadgen", "--url", f"http://127.0.0.1:{cfg.port}", "--endpoint", "completions",
                                "--dataset", "jsonl", "--prompt-file", str(prompts), "--num-prompts", str(a.num_prompts),
                                "--rate", str(rate), "--seed", str(a.seed), "--warmup", "0", "--timeout", "300",
                                "--result-json", str(result), "--detailed"], check=True,
                               stdout=subprocess.DEVNULL)
                duration = time.time() - t0
                doc = json.loads(result.read_text())
                run = doc["runs"][0] if "runs" in doc else doc
                s = {"config": name, "rate": rate, **summarize(run, duration)}
                if cfg.prefill_port:
                    after = metrics(cfg.prefill_port)
                    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
                    xfer_s = d.get("kvasir:kv_push_transfer_seconds_total", 0)
                    s["kv_bytes"] = d.get("kvasir:kv_push_bytes_total", 0)
                    s["kv_gbps"] = s["kv_bytes"] / xfer_s / 1e9 if xfer_s else float("nan")
                    s["prefill_s"] = d.get("kvasir:kv_push_prefill_seconds_total", 0)
                    s["transfer_share"] = xfer_s / s["prefill_s"] if s["prefill_s"] else float("nan")
                    s["tail_share"] = (d.get("kvasir:kv_push_tail_seconds_total", 0) / s["prefill_s"]
                                       if s["prefill_s"] else float("nan"))
                    s["prompt_tokens_prefilled"] = d.get("kvasir:prompt_tokens_total", 0)
                summary["runs"].append(s)
                print(json.dumps(s), flush=True)
            finally:
                cfg.stop()
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"| config | rate | TTFT P50 / P99 s | TPOT P50 / P99 ms | goodput req/s (share) | KV GB/s "
          f"| transfer/prefill | added after prefill |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summary["runs"]:
        kv = f"{s['kv_gbps']:.2f}" if "kv_gbps" in s else "-"
        share = f"{100 * s['transfer_share']:.1f}%" if "transfer_share" in s else "-"
        tail = f"{100 * s['tail_share']:.2f}%" if "tail_share" in s else "-"
        print(f"| {s['config']} | {s['rate']} | {s['ttft_p50']:.2f} / {s['ttft_p99']:.2f} | "
              f"{1e3 * s['tpot_p50']:.1f} / {1e3 * s['tpot_p99']:.1f} | {s['goodput_rps']:.3f} ({100 * s['good_fraction']:.0f}%) "
              f"| {kv} | {share} | {tail} |")


if __name__ == "__main__":
    sys.exit(main())
