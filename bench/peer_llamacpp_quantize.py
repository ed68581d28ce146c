#!/usr/bin/env python3
"""llama.cpp's quantizer (llama_model_quantize, the code llama-quantize runs) through
llama-cpp-python, timed, for comparison with `kvasir quantize` on the same file.

  bench/.venv/bin/python bench/peer_llamacpp_quantize.py IN.gguf OUT.gguf TYPE [--pure] [-t T]
"""
import argparse
import ctypes
import time

import llama_cpp

FTYPES = {"q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10, "q3_k_s": 11, "q3_k_m": 12,
          "q3_k_l": 13, "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("type")
    ap.add_argument("--pure", action="store_true")
    ap.add_argument("-t", type=int, default=2)
    a = ap.parse_args()
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = FTYPES[a.type]
    p.nthread = a.t
    p.pure = a.pure
    t0 = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(a.input.encode(), a.output.encode(), ctypes.byref(p))
    print(f"llama.cpp quantize {a.type}: rc {rc}, {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
