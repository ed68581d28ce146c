#!/usr/bin/env bash
# Speculative decoding at batch 1 and under concurrency: `kvasir batch` with and without
# speculation (`-s` flags, default `--spec ngram`), alternating rounds, on copy-heavy prompts (a passage to repeat verbatim) and
# free-form ones (at c = 1 the four free-form prompts in turn). Concurrency c: 4c prompts through `--max-seqs c` (c in flight, the rest queued,
# as a busy server sees them), so a request that finishes early lets the next one in. Prints
# tokens/s per round, medians and acceptance. -s given more than once compares several settings:
# each round runs the plain batch, then every setting in turn (the machine's swings between runs
# are as large as the differences sought, so settings are compared round by round).
#   bench/spec_bench.sh [-r ROUNDS] [-t THREADS] [-n MAX_TOKENS] [-c CONCURRENCY] [-s "SPEC FLAGS"]...
#                       [-w "copy free mixed"] [-1] [MODEL]
# -1: at c = 1 the first free-form prompt alone (how sessions 31-32 measured batch 1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/../build/bin/kvasir"
rounds=3 threads=2 max_tokens=160 conc=1 specs=() workloads="copy free mixed" first_only=0
while getopts "r:t:n:c:s:w:1" o; do case $o in r) rounds=$OPTARG;; t) threads=$OPTARG;; n) max_tokens=$OPTARG;; c) conc=$OPTARG;;
  s) specs+=("$OPTARG");; w) workloads=$OPTARG;; 1) first_only=1;; *) exit 2;; esac; done
[ ${#specs[@]} -gt 0 ] || specs=("--spec ngram")
shift $((OPTIND - 1))
model="${1:-$here/../models/gemma-3-270m-q4_k_m.gguf}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
python3 - "$here/prompts/copy_heavy.txt" "$max_tokens" "$conc" "$work" "$first_only" <<'PY'
import json, sys
passage = open(sys.argv[1]).read().strip()
n, conc, out, first_only = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
copy = f"Copy the text below exactly, word for word.\n\nText:\n{passage}\n\nCopy:\n"
free = ["Once upon a time, in a small village by the mountains,", "The best way to learn a new language is",
        "Write a short poem about autumn leaves:", "Here are three ideas for a weekend trip:"]
def write(name, prompts):
    with open(f"{out}/{name}.jsonl", "w") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p, "max_tokens": n, "temperature": 0}) + "\n")
total = conc if conc == 1 else 4 * conc
write("copy", [copy] * total)
# At c = 1 the four free-form prompts one after another (batch 1 throughout), not the first alone:
# one text's phrasing decides which draft depth pays.
if first_only:
    free = free[:1]
write("free", free if conc == 1 else (free * total)[:total])
write("mixed", ([copy] + free) if conc == 1 else (([copy] + free) * total)[:total])
PY
run() {  # kind label [flags...] -> "tok/s accepted%"
  local kind=$1 label=$2
  shift 2
  "$bin" batch -m "$model" -t "$threads" --input "$work/$kind.jsonl" --output "$work/out-$label.jsonl" --kv-mem 256M \
      --max-seqs "$conc" --max-batch-tokens "$(( conc > 512 ? conc : 512 ))" "$@" 2> "$work/log" > /dev/null
  local tps acc
  tps=$(grep -o "[0-9.]* tok/s aggregate" "$work/log" | awk '{print $1}')
  acc=$(grep -o "accepted ([0-9.]*%)" "$work/log" | grep -o "[0-9.]*" || echo "-")
  echo "$tps $acc"
}
same_texts() {
  python3 -c "import json,sys; t=lambda f:[json.loads(l)['text'] for l in open(f)]; print('identical' if t(sys.argv[1])==t(sys.argv[2]) else 'DIFFERENT')" "$1" "$2"
}
n=${#specs[@]}
if [ "$n" -eq 1 ]; then echo "speculation: ${specs[0]}"; else for i in "${!specs[@]}"; do echo "speculation [$i]: ${specs[$i]}"; done; fi
for kind in $workloads; do
  base=()
  declare -A spec=()
  for r in $(seq "$rounds"); do
    read -r b _ <<< "$(run "$kind" none)"
    base+=("$b")
    line="$kind round $r: none $b tok/s"
    for i in "${!specs[@]}"; do
      read -r -a flags <<< "${specs[$i]}"
      read -r s acc <<< "$(run "$kind" "spec$i" "${flags[@]}")"
      spec[$i]="${spec[$i]:-} $s"
      label=spec; [ "$n" -gt 1 ] && label="spec [$i]"
      line="$line, $label $s tok/s (accepted $acc%, texts $(same_texts "$work/out-none.jsonl" "$work/out-spec$i.jsonl"))"
    done
    echo "$line"
  done
  for i in "${!specs[@]}"; do
    label=spec; [ "$n" -gt 1 ] && label="spec [$i]"
    python3 -c "import statistics,sys; b=[float(x) for x in sys.argv[1].split()]; s=[float(x) for x in sys.argv[2].split()]; r=[y/x for x,y in zip(b,s)]; print(f'$kind c=$conc: median none {statistics.median(b):.1f} tok/s, $label {statistics.median(s):.1f} tok/s, ratio {statistics.median(s)/statistics.median(b):.2f}x; median of the rounds\' ratios {statistics.median(r):.3f}x, {sum(x >= 1 for x in r)} of {len(r)} rounds >= 1')" "${base[*]}" "${spec[$i]}"
  done
  if [ "$n" -gt 1 ]; then  # each setting against the first, round by round
    for i in $(seq 1 $((n - 1))); do
      python3 -c "import statistics,sys; a=[float(x) for x in sys.argv[1].split()]; b=[float(x) for x in sys.argv[2].split()]; r=[y/x for x,y in zip(a,b)]; print(f'$kind c=$conc: spec [$i] over spec [0], median of the rounds\' ratios {statistics.median(r):.3f}x ({sum(x >= 1 for x in r)} of {len(r)} rounds >= 1)')" "${spec[0]}" "${spec[$i]}"
    done
  fi
  unset spec
done
