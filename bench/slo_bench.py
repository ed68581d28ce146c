#!/usr/bin/env python3
"""Serving under overload (issue 42): two tenants, one sending 5x the other's rate, together 1.5x the
server's capacity, Poisson arrivals; the same arrivals against each configuration:

  alone       the polite tenant by itself (its P99 TTFT without the flood: the 2x target's base)
  capacity    both tenants at 1.0x capacity in total, fair share + admission (goodput at capacity)
  fcfs        kvasir serve --tenant none (everyone one queue, first come first served: today's order)
  fair        kvasir serve (fair share per API key)
  admission   kvasir serve --ttft-deadline-ms DEADLINE (--deadline-ms, default the SLO; fair share, and a request forecast to miss its
              TTFT deadline is refused at once with 429)
  llama       llama-server --parallel SEATS (bench/build_llamacpp.sh), if built

Capacity is measured first: closed loop at SEATS clients, requests/s. Goodput = requests per second
served with TTFT <= --slo-ttft-ms and TPOT <= --slo-tpot-ms. Writes bench/out/slo/<config>.json
(loadgen's JSON with a per-tenant section) and summary.json, and prints a Markdown table.

  bench/slo_bench.py [--model M.gguf] [--seconds 90] [--input-len 128] [--output-len 48]
                     [--seats 8] [--slo-ttft-ms 3000] [--slo-tpot-ms 250] [--capacity R]
                     [--configs alone,capacity,...] [--serve-args "--max-batch-tokens 256"] [--out DIR]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from disagg_bench import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "slo"
KEYS = {"polite": "polite-key", "flood": "flood-key"}


class Served:
    def __init__(self, args, config):
        self.port = free_port()
        log = open(OUT / f"{config}.log", "wb")
        if config == "llama":
            cmd = [str(args.llama_server), "-m", str(args.model), "--port", str(self.port), "--parallel",
                   str(args.seats), "-c", str(args.seats * 1024), "--cont-batching", "-t", str(os.cpu_count())]
        else:
            keyfile = OUT / "keys"
            keyfile.write_text("".join(f"{k} name={n}\n" for n, k in KEYS.items()))
            cmd = [str(args.bin), "serve", "-m", str(args.model), "--port", str(self.port), "--api-key-file",
                   str(keyfile), "--metrics-public", "--max-seqs", str(args.seats), "--kv-mem", "512M",
                   "--max-model-len", "4096"]
            cmd += args.serve_args.split()
            if config == "fcfs":
                cmd += ["--tenant", "none"]
            if config in ("admission", "capacity"):
                cmd += ["--ttft-deadline-ms", str(args.deadline_ms or args.slo_ttft_ms)]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        wait_healthy(self.port, self.proc)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def loadgen(args, port, extra, out_json, model_name=None):
    cmd = [str(args.bin), "loadgen", "--url", f"http://127.0.0.1:{port}", "--input-len", str(args.input_len),
           "--output-len", str(args.output_len), "--seed", "7", "--warmup", "2", "--result-json", str(out_json),
           "--slo-ttft-ms", str(args.slo_ttft_ms), "--slo-tpot-ms", str(args.slo_tpot_ms), "--timeout", "900",
           "--api-key", KEYS["polite"], *extra]
    if model_name:
        cmd += ["--model", model_name]
    r = subprocess.run(cmd, capture_output=True, text=True)
    sys.stderr.write(r.stderr[-2000:])
    print(r.stdout, flush=True)
    return json.loads(out_json.read_text())


def main():
    global OUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=ROOT / "models" / "gemma-3-270m-q4_k_m.gguf", type=Path)
    ap.add_argument("--bin", default=ROOT / "build" / "bin" / "kvasir", type=Path)
    ap.add_argument("--llama-server", default=None, type=Path)
    ap.add_argument("--seconds", type=float, default=90, help="arrivals last this long at the overload rate")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=48)
    ap.add_argument("--seats", type=int, default=8)
    ap.add_argument("--slo-ttft-ms", type=float, default=3000)
    ap.add_argument("--slo-tpot-ms", type=float, default=250)
    ap.add_argument("--deadline-ms", type=float, default=0, help="admission's TTFT deadline (0: the SLO's)")
    ap.add_argument("--capacity", type=float, default=0, help="requests/s; 0: measure it")
    ap.add_argument("--configs", default="alone,capacity,fcfs,fair,admission,llama")
    ap.add_argument("--serve-args", default="", help="more kvasir serve flags, e.g. '--max-batch-tokens 256'")
    ap.add_argument("--out", default=OUT, type=Path)
    args = ap.parse_args()
    OUT = args.out
    OUT.mkdir(parents=True, exist_ok=True)
    if args.llama_server is None:
        found = sorted((ROOT / "bench" / "out" / "llamacpp").glob("build-*/bin/llama-server"))
        args.llama_server = found[-1] if found else None

    capacity = args.capacity
    if capacity <= 0:
        s = Served(args, "fair")
        try:
            doc = loadgen(args, s.port, ["--concurrency", str(args.seats), "--num-prompts", str(4 * args.seats)],
                          OUT / "capacity-probe.json")
            capacity = doc["runs"][0]["request_throughput"]
        finally:
            s.stop()
    print(f"capacity: {capacity:.3f} req/s at {args.seats} seats", flush=True)

    overload = 1.5 * capacity
    polite_rate, flood_rate = overload / 6, 5 * overload / 6
    n = max(12, round(overload * args.seconds))
    summary = {"capacity": capacity, "overload_rate": overload, "polite_rate": polite_rate, "flood_rate": flood_rate,
               "slo_ttft_ms": args.slo_ttft_ms, "slo_tpot_ms": args.slo_tpot_ms, "configs": {}}
    for config in args.configs.split(","):
        if config == "llama" and not args.llama_server:
            print("llama: no llama-server built (bench/build_llamacpp.sh); skipped", flush=True)
            continue
        if config == "alone":
            tenants = [f"polite:{polite_rate:.4f}:{KEYS['polite']}"]
            prompts = max(6, round(polite_rate * args.seconds))
        elif config == "capacity":
            tenants = [f"polite:{capacity / 6:.4f}:{KEYS['polite']}", f"flood:{5 * capacity / 6:.4f}:{KEYS['flood']}"]
            prompts = max(12, round(capacity * args.seconds))
        else:
            tenants = [f"polite:{polite_rate:.4f}:{KEYS['polite']}", f"flood:{flood_rate:.4f}:{KEYS['flood']}"]
            prompts = n
        extra = ["--num-prompts", str(prompts)] + [x for t in tenants for x in ("--tenant", t)]
        print(f"== {config}: {' '.join(tenants)}, {prompts} requests", flush=True)
        s = Served(args, config)
        try:
            doc = loadgen(args, s.port, extra, OUT / f"{config}.json",
                          model_name="gemma-3-270m-q4_k_m" if config == "llama" else None)
        finally:
            s.stop()
        t = doc.get("tenants", {})
        summary["configs"][config] = {
            "duration_s": doc["duration"],
            "goodput": doc["request_goodput"],
            "refused": doc["refused"],
            "completed": doc["completed"],
            "polite_p50_ttft_ms": t.get("polite", {}).get("median_ttft_ms"),
            "polite_p99_ttft_ms": t.get("polite", {}).get("p99_ttft_ms"),
            "flood_p99_ttft_ms": t.get("flood", {}).get("p99_ttft_ms"),
            "polite_goodput": t.get("polite", {}).get("request_goodput"),
            "flood_goodput": t.get("flood", {}).get("request_goodput"),
            "p99_tpot_ms": doc.get("p99_tpot_ms"),
        }
        (OUT / "summary.json").write_text(json.dumps(summary, indent=2))

    print("| config | goodput (req/s) | polite P50 / P99 TTFT (ms) | flood P99 TTFT (ms) | refused | P99 TPOT (ms) |")
    print("|---|---|---|---|---|---|")
    for name, c in summary["configs"].items():
        fmt = lambda v: "-" if v is None else f"{v:.0f}"
        print(f"| {name} | {c['goodput']:.3f} | {fmt(c['polite_p50_ttft_ms'])} / {fmt(c['polite_p99_ttft_ms'])} | "
              f"{fmt(c['flood_p99_ttft_ms'])} | {c['refused']} | {fmt(c['p99_tpot_ms'])} |")


if __name__ == "__main__":
    main()
