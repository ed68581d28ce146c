#!/usr/bin/env python3
"""llama.cpp's structured-output cost, for scale beside bench/structured_decode_bench: decode time
per output token with a JSON Schema (llama-cpp-python turns it into GBNF for llama.cpp's grammar
sampler) against free text, same model, prompt and sampling, interleaved rounds.

  bench/.venv/bin/python bench/peer_llamacpp_grammar.py MODEL.gguf [--rounds R] [--tokens N] [-t T]
"""
import argparse
import json
import statistics
import time

import llama_cpp

SCHEMA = {"type": "object", "properties": {
    "title": {"type": "string"}, "summary": {"type": "string"}, "year": {"type": "integer"},
    "keywords": {"type": "array", "items": {"type": "string"}}, "rating": {"type": "number"}},
    "required": ["title", "summary", "year", "keywords", "rating"]}
PROMPT = "Write a JSON record describing a famous novel, with a long summary:\n"


def tpot(llm, grammar, tokens, seed):
    stamps = []
    for _ in llm.create_completion(PROMPT, max_tokens=tokens, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05,
                                   seed=seed, grammar=grammar, stream=True):
        stamps.append(time.perf_counter())
    if len(stamps) < 2:
        return float("nan"), len(stamps)
    return (stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1e3, len(stamps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("-t", type=int, default=2)
    a = ap.parse_args()
    llm = llama_cpp.Llama(model_path=a.model, n_ctx=1024, n_threads=a.t, n_threads_batch=a.t, verbose=False)
    t0 = time.perf_counter()
    grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)
    compile_ms = (time.perf_counter() - t0) * 1e3
    free, constrained, ratio = [], [], []
    for r in range(a.rounds):
        f, nf = tpot(llm, None, a.tokens, r)
        c, nc = tpot(llm, grammar, a.tokens, r)
        free.append(f)
        constrained.append(c)
        ratio.append(f / c)
        print(f"round {r}: free {f:.2f} ms/token ({nf} tokens), json schema {c:.2f} ms/token ({nc} tokens)")
    print(json.dumps({"free_ms": statistics.median(free), "json_ms": statistics.median(constrained),
                      "ratio": statistics.median(ratio), "schema_compile_ms": compile_ms}))


if __name__ == "__main__":
    main()
