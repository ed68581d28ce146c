#!/usr/bin/env bash
# Side-by-side speed of kvasir and llama.cpp (via llama-cpp-python) on the same GGUF files and
# thread count, interleaved run by run so both see the same machine state. Prints one Markdown
# row per test: medians over the rounds, the ratio, and kvasir's decode speed as a fraction of
# the bandwidth ceiling (GB/s / weight bytes per token) when -G is given. `-G probe` measures
# the ceiling in the run itself: probe_bandwidth (huge pages, as kvasir holds its weights) once
# per round, before the engines, and the median of those reads.
#
#   bench/compare_llamacpp.sh [-b KVASIR] [-t THREADS] [-p 512] [-n 128] [-r 5] [-k ROUNDS]
#                             [-s SEQS [-P PROMPT] [-D BATCHED_BENCH]] [-G GBPS|probe] [-d DEPTH] MODEL.gguf...
#
#   -b  the kvasir binary (default build/bin/kvasir; e.g. build-perf/bin/kvasir)
#   -s  also measure batched decode of SEQS sequences (aggregate tokens/s): kvasir through
#       bench/batched_decode_bench (-D, default: next to the kvasir binary), llama.cpp through
#       one llama_batch per step; -P prompt tokens per sequence (default 32)
#   -p 0 / -n 0 skip prefill / decode.
#   -d  both engines run pp and tg after DEPTH tokens of context (kvasir bench -d; llama.cpp with
#       flash attention, its cache rewound to the context before each run)
#
# Installs llama-cpp-python (a CPU build of llama.cpp, compiled from source: 10+ minutes on 2
# cores) into bench/.venv when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
kvasir=build/bin/kvasir threads=2 p=512 n=128 reps=5 rounds=3 seqs=0 prompt=32 batched="" gbps="" depth=0
while getopts "b:t:p:n:r:k:s:P:D:G:d:" opt; do
  case $opt in
    b) kvasir=$OPTARG ;; t) threads=$OPTARG ;; p) p=$OPTARG ;; n) n=$OPTARG ;; r) reps=$OPTARG ;;
    k) rounds=$OPTARG ;; s) seqs=$OPTARG ;; P) prompt=$OPTARG ;; D) batched=$OPTARG ;; G) gbps=$OPTARG ;;
    d) depth=$OPTARG ;; *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-b KVASIR] [-t T] [-p P] [-n N] [-r R] [-k ROUNDS] [-s SEQS] [-G GBPS] MODEL.gguf..." >&2; exit 2; }
[ -x "$kvasir" ] || { echo "no kvasir binary at $kvasir (build it, or pass -b)" >&2; exit 1; }
[ -n "$batched" ] || batched=$(dirname "$kvasir")/batched_decode_bench
if [ "$seqs" -gt 0 ] && [ ! -x "$batched" ]; then
  echo "no $batched: configure with -DKVASIR_BENCH=ON and build batched_decode_bench (or pass -D)" >&2
  exit 1
fi
if [ "$gbps" = probe ] && [ ! -x "$(dirname "$kvasir")/probe_bandwidth" ]; then
  echo "-G probe needs probe_bandwidth next to the kvasir binary (configure with -DKVASIR_BENCH=ON)" >&2
  exit 1
fi

if [ ! -x bench/.venv/bin/python ] || ! bench/.venv/bin/python -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv bench/.venv
  echo "installing llama-cpp-python (builds llama.cpp from source)..." >&2
  # Native without AMX (CMake takes CFLAGS/CXXFLAGS as its initial flags): ggml's AMX matmul dies
  # with SIGILL on the Sapphire Rapids host (bench/build_llamacpp.sh says more).
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  CFLAGS="$no_amx" CXXFLAGS="$no_amx" CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_BLAS=OFF" \
    bench/.venv/bin/pip install -q --no-cache-dir llama-cpp-python
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| model | threads | test | kvasir t/s | llama.cpp t/s | kvasir / llama.cpp | kvasir % of BW ceiling |"
echo "|---|---|---|---|---|---|---|"
for model in "$@"; do
  : >"$tmp/runs.jsonl"
  for ((k = 0; k < rounds; k++)); do
    if [ "$gbps" = probe ]; then
      "$(dirname "$kvasir")/probe_bandwidth" 512 "$threads" 3 2m |
        python3 -c 'import json,re,sys; print(json.dumps({"engine": "probe", "test": "probe", "gbps": float(re.search(r"read ([0-9.]+) GB/s", sys.stdin.read()).group(1))}))' >>"$tmp/runs.jsonl"
    fi
    if [ "$p" -gt 0 ] || [ "$n" -gt 0 ]; then
      "$kvasir" bench -m "$model" -p "$p" -n "$n" -d "$depth" -r "$reps" -t "$threads" --json |
        python3 -c 'import json,sys; [print(json.dumps(dict(r, engine="kvasir"))) for r in json.load(sys.stdin)]' >>"$tmp/runs.jsonl"
      bench/.venv/bin/python bench/peer_llamacpp.py -m "$model" -p "$p" -n "$n" -d "$depth" -r "$reps" -t "$threads" \
        2>/dev/null >>"$tmp/runs.jsonl"
    fi
    if [ "$seqs" -gt 0 ]; then
      "$batched" -m "$model" -s "$seqs" -p "$prompt" -n "$n" -r "$reps" -t "$threads" >>"$tmp/runs.jsonl"
      bench/.venv/bin/python bench/peer_llamacpp.py -m "$model" --parallel "$seqs" --prompt "$prompt" -n "$n" \
        -r "$reps" -t "$threads" 2>/dev/null >>"$tmp/runs.jsonl"
    fi
  done
  python3 - "$model" "$threads" "$gbps" "$tmp/runs.jsonl" <<'PY'
import json, statistics, sys
model, threads, gbps, path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
runs = [json.loads(l) for l in open(path) if l.strip()]
if gbps == "probe":
    reads = [r["gbps"] for r in runs if r["engine"] == "probe"]
    gbps = f"{statistics.median(reads):.1f}" if reads else ""
    print(f"<!-- probe_bandwidth, 2 MiB pages, {threads} threads, per round: {', '.join(f'{x:.1f}' for x in reads)} GB/s -->")
runs = [r for r in runs if r["engine"] != "probe"]
tests, wbytes = [], None
for r in runs:
    if r["test"] not in tests:
        tests.append(r["test"])
    wbytes = r.get("weight_bytes_per_token", wbytes)
for test in tests:
    kv = [r["tokens_per_s"] for r in runs if r["test"] == test and r["engine"] == "kvasir"]
    ll = [r["tokens_per_s"] for r in runs if r["test"] == test and r["engine"] == "llama.cpp"]
    if not kv or not ll:
        continue
    mk, ml = statistics.median(kv), statistics.median(ll)
    ceiling = ""
    if gbps and wbytes and test.startswith("tg") and " x" not in test and "@" not in test:
        ceiling = f"{100 * mk * wbytes / (float(gbps) * 1e9):.0f}% of {float(gbps) * 1e9 / wbytes:.1f}"
    print(f"| {model.split('/')[-1]} | {threads} | {test} | {mk:.1f} | {ml:.1f} | {mk / ml:.2f}x | {ceiling} |")
PY
done
