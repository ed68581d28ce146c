#!/usr/bin/env python3
"""llama.cpp's speed on a GGUF file through llama-cpp-python, measured like `kvasir bench`.

pp: one P-token prefill of random tokens (n_batch = 512); tg: N single-token decode steps
after one token of context. With -d D both start after D random tokens of context instead
(named pp512@dD / tg128@dD, like `kvasir bench -d`); the context is computed once and the
cache rewound to it before every run. With --parallel S: batched decode like bench/batched_decode_bench
(S sequences prefilled with --prompt tokens each, then N steps of one token per sequence in
one llama_batch; aggregate tokens/s). Prints one JSON object per test on stdout.
"""
import argparse
import ctypes
import json
import random
import statistics
import time

import llama_cpp


def single(args) -> None:
    d = args.d
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=d + max(args.p, args.n) + 16, n_batch=512, n_ubatch=512,
                          n_threads=args.t, n_threads_batch=args.t, verbose=False, flash_attn=True)
    vocab = llm.n_vocab()
    rng = random.Random(42)
    if d > 0:
        llm.reset()
        llm._ctx.kv_cache_clear()
        llm.eval([rng.randrange(vocab) for _ in range(d)])

    def rewind() -> None:
        if d > 0:
            llm.n_tokens = d  # eval() drops the cache past n_tokens
        else:
            llm.reset()
            llm._ctx.kv_cache_clear()

    def pp_once() -> float:
        tokens = [rng.randrange(vocab) for _ in range(args.p)]
        rewind()
        t0 = time.perf_counter()
        llm.eval(tokens)
        return args.p / (time.perf_counter() - t0)

    def tg_once() -> float:
        rewind()
        if d == 0:
            llm.eval([1])
        tok = 1
        t0 = time.perf_counter()
        for _ in range(args.n):
            tok = (tok * 2654435761 + 7) % vocab
            llm.eval([tok])
        return args.n / (time.perf_counter() - t0)

    at = "@d%d" % d if d > 0 else ""
    for name, fn, on in (("pp%d%s" % (args.p, at), pp_once, args.p > 0), ("tg%d%s" % (args.n, at), tg_once, args.n > 0)):
        if not on:
            continue
        fn()  # warm-up
        report(name, [fn() for _ in range(args.r)], args.t)


def batched(args) -> None:
    """S sequences decoded together through the low-level API (one llama_batch per step)."""
    S, P, N = args.parallel, args.prompt, args.n
    global _quiet  # the callback must outlive the library's use of it
    _quiet = llama_cpp.llama_log_callback(lambda level, text, user: None)
    llama_cpp.llama_log_set(_quiet, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    model = llama_cpp.llama_model_load_from_file(args.model.encode(), llama_cpp.llama_model_default_params())
    cp = llama_cpp.llama_context_default_params()
    cp.n_ctx = S * (P + N) + 64
    cp.n_batch = cp.n_ubatch = max(512, S)
    cp.n_seq_max = S
    cp.n_threads = cp.n_threads_batch = args.t
    cp.flash_attn_type = 1  # enabled, as in the single-sequence runs
    ctx = llama_cpp.llama_init_from_model(model, cp)
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    batch = llama_cpp.llama_batch_init(max(P, S), 0, 1)
    rng = random.Random(42)

    def fill(rows):
        batch.n_tokens = len(rows)
        for i, (tok, pos, seq, logits) in enumerate(rows):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = 1 if logits else 0
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def once() -> float:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        for s in range(S):
            fill([(rng.randrange(vocab), i, s, i == P - 1) for i in range(P)])
        toks = [(s * 7919 + 1) % vocab for s in range(S)]
        t0 = time.perf_counter()
        for step in range(N):
            fill([(toks[s], P + step, s, True) for s in range(S)])
            toks = [(t * 2654435761 + 7) % vocab for t in toks]
        return S * N / (time.perf_counter() - t0)

    once()  # warm-up
    report("tg%d x%d" % (N, S), [once() for _ in range(args.r)], args.t)
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)


def report(name, runs, threads) -> None:
    print(json.dumps({"engine": "llama.cpp", "test": name, "threads": threads,
                      "tokens_per_s": statistics.mean(runs),
                      "stdev": statistics.stdev(runs) if len(runs) > 1 else 0.0,
                      "median": statistics.median(runs)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-d", type=int, default=0, help="context depth before the tests")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=0, help="batched decode of this many sequences")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens per sequence (--parallel)")
    args = ap.parse_args()
    if args.parallel > 0:
        batched(args)
    else:
        single(args)


if __name__ == "__main__":
    main()
