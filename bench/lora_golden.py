#!/usr/bin/env python3
"""llama.cpp's outputs with a LoRA adapter: the reference tests/model/lora_golden_test.cpp checks.

For each base model: `kvasir synth-lora` writes a seeded adapter (the test writes the same bytes
again), llama-server (bench/build_llamacpp.sh) runs the base with `--lora`, and for a few
prompts given as token ids its greedy continuation and the top log-probabilities of every
generated token are recorded in tests/model/data/lora_golden_<name>.json.

  bench/lora_golden.py [--kvasir build/bin/kvasir] [--llama-server PATH]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("KVASIR_SHARED_DIR", ROOT.parent / "shared"))

CASES = [  # name, model, rank, alpha, seed, prompts (token ids)
    ("stories260K", SHARED / "models" / "stories260K.gguf", 8, 16.0, 1,
     [[1, 403, 407, 261, 378], [1, 317, 394, 261, 370], [1, 291, 400, 428]]),
    ("gemma3_f32", SHARED / "models" / "fixture-gemma3-f32.gguf", 4, 8.0, 1,
     [[1, 168, 488, 80, 205, 336], [1, 40, 300, 17, 99], [1, 250, 251, 252, 253, 254, 255]]),
    ("gemma3_270m", ROOT / "models" / "gemma-3-270m-q4_k_m.gguf", 8, 8.0, 1,
     [[2, 818, 5279, 529, 7001, 563], [2, 14946, 3324, 496, 990, 236764, 496, 2268], [2, 2063, 10779, 78113, 236769, 236749, 1473]]),
]
N_PREDICT = 12
N_PROBS = 5


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit("llama-server exited")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.2)
    sys.exit("llama-server did not become ready")


def greedy(server, model, lora, prompts, port):
    env = dict(os.environ, LD_LIBRARY_PATH=str(Path(server).parent))
    extra = ["--lora", lora] if lora else []
    proc = subprocess.Popen([server, "-m", model, *extra, "--port", str(port), "-c", "512", "-t", "2",
                             "-np", "1", "--no-warmup"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        out = []
        for ids in prompts:
            r = post(port, "/completion", {"prompt": ids, "n_predict": N_PREDICT, "samplers": ["top_k"], "top_k": 1,
                                           "n_probs": N_PROBS, "cache_prompt": False, "return_tokens": True})
            steps = [{"top": [[t["id"], t["logprob"]] for t in p["top_logprobs"]]} for p in r["completion_probabilities"]]
            out.append({"prompt": ids, "tokens": r["tokens"], "steps": steps})
    finally:
        proc.terminate()
        proc.wait()
    return out


def run_case(server, kvasir, name, model, rank, alpha, seed, prompts, lora, port):
    subprocess.run([kvasir, "synth-lora", "-m", model, "-o", lora, "--rank", str(rank), "--alpha", str(alpha),
                    "--seed", str(seed)], check=True)
    out = greedy(server, model, lora, prompts, port)
    base = greedy(server, model, None, prompts, port)
    sha = hashlib.sha256(Path(lora).read_bytes()).hexdigest()
    return {"model": Path(model).name, "rank": rank, "alpha": alpha, "seed": seed, "adapter_sha256": sha,
            "source": "llama-server --lora (llama-cpp-python 0.3.36 sdist), /completion greedy, n_probs 5",
            "cases": out, "base_cases": base}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvasir", default=str(ROOT / "build" / "bin" / "kvasir"))
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--port", type=int, default=18731)
    a = ap.parse_args()
    server = a.llama_server or next(iter(sorted((ROOT / "bench" / "out" / "llamacpp").glob("build-*/bin/llama-server"))), None)
    if not server:
        sys.exit("no llama-server: run bench/build_llamacpp.sh")
    dest = ROOT / "tests" / "model" / "data"
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, model, rank, alpha, seed, prompts in CASES:
            if not Path(model).exists():
                print(f"{name}: {model} missing, skipped")
                continue
            g = run_case(str(server), a.kvasir, name, str(model), rank, alpha, seed, prompts, f"{tmp}/{name}.gguf", a.port)
            (dest / f"lora_golden_{name}.json").write_text(json.dumps(g, indent=1) + "\n")
            print(f"{name}: {[c['tokens'] for c in g['cases']]}")


if __name__ == "__main__":
    main()
