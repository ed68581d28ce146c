#!/usr/bin/env bash
# Side-by-side speed of kvasir and llama.cpp (via llama-cpp-python) on the same GGUF files and
# thread count, interleaved run by run so both see the same machine state. Prints the ratios.
#
#   bench/compare_llamacpp.sh [-t THREADS] [-p 512] [-n 128] [-r 5] [-k ROUNDS] MODEL.gguf...
#
# Installs llama-cpp-python (a CPU build of llama.cpp, compiled from source: several minutes the
# first time) into bench/.venv.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 p=512 n=128 reps=5 rounds=3
while getopts "t:p:n:r:k:" opt; do
  case $opt in t) threads=$OPTARG ;; p) p=$OPTARG ;; n) n=$OPTARG ;; r) reps=$OPTARG ;; k) rounds=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "usage: $0 [-t T] [-p P] [-n N] [-r R] [-k ROUNDS] MODEL.gguf..." >&2; exit 2; }

if [ ! -x bench/.venv/bin/python ] || ! bench/.venv/bin/python -c "import llama_cpp" 2>/dev/null; then
  python3 -m venv bench/.venv
  echo "installing llama-cpp-python (builds llama.cpp from source)..." >&2
  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_BLAS=OFF" bench/.venv/bin/pip install -q llama-cpp-python
fi
[ -x build/bin/kvasir ] || make build

for model in "$@"; do
  kv_pp=() kv_tg=() ll_pp=() ll_tg=()
  for ((k = 0; k < rounds; k++)); do
    out=$(build/bin/kvasir bench -m "$model" -p "$p" -n "$n" -r "$reps" -t "$threads" --json)
    kv_pp+=("$(echo "$out" | python3 -c 'import json,sys; print([r["tokens_per_s"] for r in json.load(sys.stdin) if r["test"].startswith("pp")][0])')")
    kv_tg+=("$(echo "$out" | python3 -c 'import json,sys; print([r["tokens_per_s"] for r in json.load(sys.stdin) if r["test"].startswith("tg")][0])')")
    out=$(bench/.venv/bin/python bench/peer_llamacpp.py -m "$model" -p "$p" -n "$n" -r "$reps" -t "$threads")
    ll_pp+=("$(echo "$out" | python3 -c 'import json,sys; print([json.loads(l)["tokens_per_s"] for l in sys.stdin if "\"pp" in l][0])')")
    ll_tg+=("$(echo "$out" | python3 -c 'import json,sys; print([json.loads(l)["tokens_per_s"] for l in sys.stdin if "\"tg" in l][0])')")
  done
  python3 - "$model" "$threads" "$p" "$n" "${kv_pp[*]}" "${kv_tg[*]}" "${ll_pp[*]}" "${ll_tg[*]}" <<'PY'
import statistics, sys
model, t, p, n = sys.argv[1:5]
kv_pp, kv_tg, ll_pp, ll_tg = ([float(x) for x in a.split()] for a in sys.argv[5:9])
med = statistics.median
print(f"| {model.split('/')[-1]} | {t} | pp{p} | {med(kv_pp):.1f} | {med(ll_pp):.1f} | {med(kv_pp)/med(ll_pp):.2f}x |")
print(f"| {model.split('/')[-1]} | {t} | tg{n} | {med(kv_tg):.1f} | {med(ll_tg):.1f} | {med(kv_tg)/med(ll_tg):.2f}x |")
PY
done
