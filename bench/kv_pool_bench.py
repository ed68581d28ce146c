#!/usr/bin/env python3
"""Multi-turn chat behind the router with two replicas, with and without the shared KV pool.

Each configuration: two `serve` instances with a small KV pool (--kv-mem, so that growing
histories are evicted from memory), `kvasir router --backend` in front, and `kvasir loadgen
--dataset conversations` (each turn's prompt is the conversation so far plus a new message, turns
in order, closed loop). With the pool, both replicas share blocks through one redis-server
(--kv-store); the router then sees the pool in both replicas' /health and lets load win sooner
(--pooled-affinity-slack); --pooled-slacks runs the pool under several of them (2: the plain
slack, the router ignoring the pool), to tell the router's part from the pool's. --pin runs each replica on its own core
(taskset, one compute thread) so that the replicas are two machines' worth of compute, not two
processes sharing the same cores. Reports the prefix-cache hit rate (tokens served from the cache,
any tier, over prompt tokens looked up, both replicas), the router's placements and P50/P99 TTFT.

  bench/kv_pool_bench.py [--model models/gemma-3-270m-q4_k_m.gguf] [--conversations 16] [--turns 6]
                         [--concurrency 8] [--kv-mem 96M] [--pin] [--rounds 1] [--pooled-slacks 2,1]
"""
import argparse
import json
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(url, proc):
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit(f"{url}: exited")
        try:
            urllib.request.urlopen(url + "/health", timeout=2)
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit(f"{url}: not ready")


def counters(url):
    out = {}
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line.startswith("kvasir:prefix_cache_") or line.startswith("kvasir:kv_tier_loaded_blocks_total"):
            k, v = line.rsplit(" ", 1)
            out[k.split("{")[0] + ("{" + k.split("tier=")[1].split(",")[0].split("}")[0] + "}" if "tier=" in k else "")] = float(v)
    return out


def placements(url):
    out = {}
    for line in urllib.request.urlopen(url + "/metrics").read().decode().splitlines():
        if line.startswith("kvasir_router_placements_total{"):
            k, v = line.rsplit(" ", 1)
            out[k.split('"')[1]] = int(float(v))
    return out


def run(a, pooled, router_slack=None):
    procs = []
    try:
        store = []
        if pooled:
            rport = free_port()
            procs.append(subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                                           "--appendonly", "no", "--maxmemory", "2gb", "--maxmemory-policy", "allkeys-lru"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            time.sleep(0.5)
            store = ["--kv-store", f"redis://127.0.0.1:{rport}"]
        urls = []
        for i in range(2):
            port = free_port()
            pin = ["taskset", "-c", str(i)] if a.pin else []
            threads = ["--threads", "1"] if a.pin else []
            p = subprocess.Popen([*pin, a.kvasir, "serve", "-m", a.model, "--port", str(port), "--kv-mem", a.kv_mem,
                                  "--max-seqs", str(a.concurrency), *threads, *store],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(p)
            urls.append(f"http://127.0.0.1:{port}")
            wait(urls[-1], p)
        rport = free_port()
        slack = ["--pooled-affinity-slack", str(router_slack)] if router_slack is not None else []
        router = subprocess.Popen([a.kvasir, "router", "--port", str(rport), *slack,
                                   *sum((["--backend", u] for u in urls), [])],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(router)
        wait(f"http://127.0.0.1:{rport}", router)
        time.sleep(1.5)  # the router's first health round
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run([a.kvasir, "loadgen", "--url", f"http://127.0.0.1:{rport}", "--dataset", "conversations",
                            "--turns", str(a.turns), "--num-prompts", str(a.conversations * a.turns), "--prefix-len",
                            str(a.prefix_len), "--input-len", str(a.input_len), "--output-len", str(a.output_len),
                            "--concurrency", str(a.concurrency), "--seed", "1", "--result-json", out.name],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            res = json.loads(Path(out.name).read_text())
        c = [counters(u) for u in urls]
        placed = placements(f"http://127.0.0.1:{rport}")
        hits = sum(x.get("kvasir:prefix_cache_hits_total", 0) for x in c)
        queries = sum(x.get("kvasir:prefix_cache_queries_total", 0) for x in c)
        from_pool = sum(x.get('kvasir:kv_tier_loaded_blocks_total{"redis"}', 0) for x in c) * 16
        run0 = res["runs"][0] if "runs" in res else res
        return hits / max(queries, 1), from_pool / max(queries, 1), run0, placed
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvasir", default=str(ROOT / "build" / "bin" / "kvasir"))
    ap.add_argument("--model", default=str(ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--conversations", type=int, default=16)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--prefix-len", type=int, default=512)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--kv-mem", default="96M")
    ap.add_argument("--pin", action="store_true", help="each replica on its own core, one compute thread")
    ap.add_argument("--rounds", type=int, default=1, help="the configurations, interleaved, this many times")
    ap.add_argument("--pooled-slacks", default="2,1", help="router --pooled-affinity-slack values to run with the pool")
    ap.add_argument("--no-baseline", action="store_true", help="skip the configuration without the pool")
    a = ap.parse_args()
    configs = [] if a.no_baseline else [("no pool", False, None)]
    configs += [(f"pool, slack {v}", True, int(v)) for v in a.pooled_slacks.split(",")]
    for rnd in range(a.rounds):
        for name, pooled, slack in configs:
            rate, pool_rate, r, placed = run(a, pooled, slack)
            keys = {k: v for k, v in r.items() if "ttft" in k and ("p50" in k or "p99" in k or "median" in k)}
            print(f"round {rnd + 1} {name:19s}: prefix-cache hit rate {rate:.1%} (from the pool {pool_rate:.1%}), "
                  f"placements {json.dumps(placed)}, TTFT {json.dumps(keys)}", flush=True)


if __name__ == "__main__":
    main()
