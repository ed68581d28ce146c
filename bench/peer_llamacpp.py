#!/usr/bin/env python3
"""llama.cpp's speed on a GGUF file through llama-cpp-python, measured like `kvasir bench`.

pp: one P-token prefill of random tokens (n_batch = 512); tg: N single-token decode steps
after one token of context. Prints one JSON object per test on stdout.
"""
import argparse
import json
import random
import statistics
import time

import llama_cpp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-t", type=int, default=2)
    args = ap.parse_args()

    llm = llama_cpp.Llama(model_path=args.model, n_ctx=max(args.p, args.n) + 16, n_batch=512, n_ubatch=512,
                          n_threads=args.t, n_threads_batch=args.t, verbose=False, flash_attn=True)
    vocab = llm.n_vocab()
    rng = random.Random(42)

    def pp_once() -> float:
        tokens = [rng.randrange(vocab) for _ in range(args.p)]
        llm.reset()
        llm._ctx.kv_cache_clear()
        t0 = time.perf_counter()
        llm.eval(tokens)
        return args.p / (time.perf_counter() - t0)

    def tg_once() -> float:
        llm.reset()
        llm._ctx.kv_cache_clear()
        llm.eval([1])
        tok = 1
        t0 = time.perf_counter()
        for _ in range(args.n):
            tok = (tok * 2654435761 + 7) % vocab
            llm.eval([tok])
        return args.n / (time.perf_counter() - t0)

    for name, fn, on in (("pp%d" % args.p, pp_once, args.p > 0), ("tg%d" % args.n, tg_once, args.n > 0)):
        if not on:
            continue
        fn()  # warm-up
        runs = [fn() for _ in range(args.r)]
        print(json.dumps({"engine": "llama.cpp", "test": name, "threads": args.t,
                          "tokens_per_s": statistics.mean(runs),
                          "stdev": statistics.stdev(runs) if len(runs) > 1 else 0.0,
                          "median": statistics.median(runs)}), flush=True)


if __name__ == "__main__":
    main()
