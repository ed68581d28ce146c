#!/usr/bin/env python3
"""Batched decode with LoRA adapters: the same concurrent load on the base model, on one adapter,
and spread over four adapters (requests on different adapters share every batch), interleaved.

  bench/lora_bench.py [--model models/gemma-3-270m-q4_k_m.gguf] [--rank 8] [--concurrency 16]
                      [--tokens 64] [--rounds 3]

Prints output tokens/s per configuration and round, then medians and ratios to the base.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def run_load(port, models, concurrency, tokens):
    out = [0] * concurrency

    def one(i):
        r = post(port, {"model": models[i % len(models)], "prompt": f"Story number {i}: once upon a time",
                        "max_tokens": tokens, "temperature": 0, "ignore_eos": True})
        out[i] = r["usage"]["completion_tokens"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(out) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvasir", default=str(ROOT / "build" / "bin" / "kvasir"))
    ap.add_argument("--model", default=str(ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=18741)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        flags = []
        for k in range(4):
            path = f"{tmp}/a{k}.gguf"
            subprocess.run([a.kvasir, "synth-lora", "-m", a.model, "-o", path, "--rank", str(a.rank), "--seed",
                            str(k + 1)], check=True, capture_output=True)
            flags += ["--lora", f"a{k}={path}"]
        proc = subprocess.Popen([a.kvasir, "serve", "-m", a.model, "--port", str(a.port), "--max-seqs",
                                 str(a.concurrency), *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{a.port}/health", timeout=2)
                    break
                except Exception:
                    time.sleep(0.1)
            base = Path(a.model).stem
            configs = {"base": [base], "one adapter": ["a0"], "four adapters": ["a0", "a1", "a2", "a3"]}
            run_load(a.port, [base], a.concurrency, 8)  # warm-up
            results = {k: [] for k in configs}
            for rnd in range(a.rounds):
                for name, models in configs.items():
                    tps = run_load(a.port, models, a.concurrency, a.tokens)
                    results[name].append(tps)
                    print(f"round {rnd + 1} {name:14s} {tps:7.1f} tok/s", flush=True)
        finally:
            proc.terminate()
            proc.wait()
    med = {k: statistics.median(v) for k, v in results.items()}
    for k, v in med.items():
        print(f"median {k:14s} {v:7.1f} tok/s  {v / med['base']:.3f}x base")


if __name__ == "__main__":
    sys.exit(main())
