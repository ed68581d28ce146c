#!/usr/bin/env python3
"""TTFT of a request whose long prefix is (a) cold, (b) in the prefix cache in memory, (c) on the disk
tier after a restart (page cache as it is, and dropped where the kernel lets us), and the disk
tier's read rate; with --shared, (d) held by another instance: two servers sharing a Redis server
(--kv-store), the prompt computed on one and asked of the other.

  bench/kv_disk_bench.py [--model models/gemma-3-270m-q4_k_m.gguf] [--tokens 4000] [--rounds 3] [--shared]

Each round uses a prefix of its own (so (a) is cold), ending in a different question; TTFT is the
time of a request with max_tokens 1. Prints per round and medians.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def wait(port, proc):
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit("serve exited")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit("serve not ready")


def metrics(port):
    out = {}
    for line in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode().splitlines():
        if line.startswith("kvasir:kv_tier") and ('tier="disk"' in line or "tier=" not in line):
            k, v = line.rsplit(" ", 1)
            out[k.split("{")[0]] = float(v)
    return out


def ttft(port, ids):
    body = json.dumps({"prompt": ids, "max_tokens": 1, "temperature": 0}).encode()
    t0 = time.perf_counter()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    r = json.loads(urllib.request.urlopen(req, timeout=900).read())
    dt = time.perf_counter() - t0
    cached = (r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return dt, cached


def drop_caches():
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except Exception:
        return False


def shared_rounds(a):
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        rport = sock.getsockname()[1]
    redis = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                              "no", "--maxmemory", "4gb", "--maxmemory-policy", "allkeys-lru"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    base = [a.kvasir, "serve", "-m", a.model, "--kv-store", f"redis://127.0.0.1:{rport}", "--max-model-len",
            str(a.tokens + 64), *a.serve_args.split()]
    procs = [subprocess.Popen(base + ["--port", str(a.port + k)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for k in (0, 1)]
    rows = []
    try:
        for k, p in enumerate(procs):
            wait(a.port + k, p)
        for rnd in range(a.rounds):
            ids = [2] + [1000 + (i * 7919 + rnd * 104729 + 17) % 20000 for i in range(a.tokens - 1)]
            cold, _ = ttft(a.port, ids)
            for _ in range(600):  # the writes to the store are asynchronous
                m = urllib.request.urlopen(f"http://127.0.0.1:{a.port}/metrics").read().decode()
                written = [float(l.rsplit(" ", 1)[1]) for l in m.splitlines()
                           if l.startswith('kvasir:kv_tier_written_blocks_total') and 'tier="redis"' in l]
                if written and written[0] >= (rnd + 1) * ((a.tokens - 1) // 16):
                    break
                time.sleep(0.05)
            other, cached = ttft(a.port + 1, ids)
            rows.append((cold, other))
            print(f"round {rnd + 1}: cold on A {cold * 1e3:.0f} ms, on B from the shared store {other * 1e3:.0f} ms "
                  f"({cached} cached, {other / cold:.1%} of cold)", flush=True)
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        redis.kill()
        redis.wait()
    c = statistics.median(r[0] for r in rows)
    o = statistics.median(r[1] for r in rows)
    print(f"median: cold {c * 1e3:.0f} ms, another instance's blocks {o * 1e3:.0f} ms ({o / c:.1%})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvasir", default=str(ROOT / "build" / "bin" / "kvasir"))
    ap.add_argument("--model", default=str(ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=18761)
    ap.add_argument("--serve-args", default="")
    ap.add_argument("--shared", action="store_true", help="measure (d) through a Redis server instead")
    a = ap.parse_args()
    if a.shared:
        return shared_rounds(a)
    tmp = tempfile.mkdtemp(prefix="kvdisk_bench_")
    args = [a.kvasir, "serve", "-m", a.model, "--port", str(a.port), "--kv-disk", tmp, "--kv-disk-size", "20G",
            "--max-model-len", str(a.tokens + 64), *a.serve_args.split()]
    rows = []
    try:
        for rnd in range(a.rounds):
            # Token ids of ordinary text-like variety, distinct per round.
            ids = [2] + [1000 + (i * 7919 + rnd * 104729) % 20000 for i in range(a.tokens - 1)]
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait(a.port, proc)
            cold, _ = ttft(a.port, ids)
            mem, mem_cached = ttft(a.port, ids)
            proc.terminate()
            proc.wait()
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait(a.port, proc)
            disk, disk_cached = ttft(a.port, ids)
            m = metrics(a.port)
            rate = m.get("kvasir:kv_tier_read_bytes_total", 0) / max(m.get("kvasir:kv_tier_load_seconds_total", 0), 1e-9)
            proc.terminate()
            proc.wait()
            dropped = None
            if drop_caches():
                proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wait(a.port, proc)
                ttft(a.port, ids[:8])  # (a request that loads nothing: warms the server itself)
                dropped, _ = ttft(a.port, ids)
                proc.terminate()
                proc.wait()
            rows.append((cold, mem, disk, dropped, rate, mem_cached, disk_cached))
            print(f"round {rnd + 1}: cold {cold * 1e3:.0f} ms, memory {mem * 1e3:.0f} ms ({mem_cached} cached), "
                  f"disk {disk * 1e3:.0f} ms ({disk_cached} cached, {disk / cold:.1%} of cold), "
                  f"disk after drop_caches {'n/a' if dropped is None else f'{dropped * 1e3:.0f} ms ({dropped / cold:.1%})'}, "
                  f"read rate {rate / 1e9:.2f} GB/s", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = lambda k: statistics.median(r[k] for r in rows if r[k] is not None) if any(r[k] is not None for r in rows) else None
    c, m_, d, dd = med(0), med(1), med(2), med(3)
    print(f"median: cold {c * 1e3:.0f} ms, memory {m_ * 1e3:.0f} ms ({m_ / c:.1%}), disk {d * 1e3:.0f} ms ({d / c:.1%})"
          + ("" if dd is None else f", disk after drop_caches {dd * 1e3:.0f} ms ({dd / c:.1%})")
          + f", read rate {med(4) / 1e9:.2f} GB/s")


if __name__ == "__main__":
    main()
