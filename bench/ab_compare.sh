#!/usr/bin/env bash
# A/B speed of two kvasir builds on the same model, interleaved run by run (A, B, A, B, ...) so
# both see the same machine state; prints the median tokens/s of each test and the ratio B/A.
#
#   bench/ab_compare.sh [-k ROUNDS] BIN_A BIN_B MODEL.gguf [kvasir bench args, e.g. -p 0 -n 64 -r 3 -t 2]
set -euo pipefail
rounds=5
while getopts "k:" opt; do case $opt in k) rounds=$OPTARG ;; *) exit 2 ;; esac; done
shift $((OPTIND - 1))
[ $# -ge 3 ] || { echo "usage: $0 [-k ROUNDS] BIN_A BIN_B MODEL.gguf [bench args]" >&2; exit 2; }
a=$1 b=$2 model=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ((k = 0; k < rounds; k++)); do
  "$a" bench -m "$model" "$@" --json >"$tmp/a$k.json"
  "$b" bench -m "$model" "$@" --json >"$tmp/b$k.json"
done
python3 - "$tmp" "$rounds" "$model" <<'PY'
import json, statistics, sys, os
tmp, rounds, model = sys.argv[1], int(sys.argv[2]), os.path.basename(sys.argv[3])
res = {}
for side in "ab":
    for k in range(rounds):
        for r in json.load(open(f"{tmp}/{side}{k}.json")):
            res.setdefault((r["test"], r["threads"]), {}).setdefault(side, []).append(r["tokens_per_s"])
for (test, t), v in res.items():
    ma, mb = statistics.median(v["a"]), statistics.median(v["b"])
    print(f"| {model} | t{t} | {test} | A {ma:.2f} | B {mb:.2f} | B/A {mb/ma:.3f} |")
PY
