#!/usr/bin/env bash
# Speculative decoding at batch 1 and under concurrency: `kvasir batch` with and without
# speculation (`-s` flags, default `--spec ngram`), alternating rounds, on copy-heavy prompts (a passage to repeat verbatim) and
# free-form ones (at c = 1 the four free-form prompts in turn). Concurrency c: 4c prompts through `--max-seqs c` (c in flight, the rest queued,
# as a busy server sees them), so a request that finishes early lets the next one in. Prints
# tokens/s per round, medians and acceptance.
#   bench/spec_bench.sh [-r ROUNDS] [-t THREADS] [-n MAX_TOKENS] [-c CONCURRENCY] [-s "SPEC FLAGS"]
#                       [-w "copy free mixed"] [-1] [MODEL]
# -1: at c = 1 the first free-form prompt alone (how sessions 31-32 measured batch 1).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/../build/bin/kvasir"
rounds=3 threads=2 max_tokens=160 conc=1 spec_flags="--spec ngram" workloads="copy free mixed" first_only=0
while getopts "r:t:n:c:s:w:1" o; do case $o in r) rounds=$OPTARG;; t) threads=$OPTARG;; n) max_tokens=$OPTARG;; c) conc=$OPTARG;;
  s) spec_flags=$OPTARG;; w) workloads=$OPTARG;; 1) first_only=1;; *) exit 2;; esac; done
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
run() {  # kind none|spec -> "tok/s accepted%"
  local kind=$1 label=$2 flags=()
  [ "$label" = spec ] && read -r -a flags <<< "$spec_flags"
  "$bin" batch -m "$model" -t "$threads" --input "$work/$kind.jsonl" --output "$work/out-$label.jsonl" --kv-mem 256M \
      --max-seqs "$conc" --max-batch-tokens "$(( conc > 512 ? conc : 512 ))" "${flags[@]}" 2> "$work/log" > /dev/null
  local tps acc
  tps=$(grep -o "[0-9.]* tok/s aggregate" "$work/log" | awk '{print $1}')
  acc=$(grep -o "accepted ([0-9.]*%)" "$work/log" | grep -o "[0-9.]*" || echo "-")
  echo "$tps $acc"
}
echo "speculation: $spec_flags"
for kind in $workloads; do
  base=() spec=()
  for r in $(seq "$rounds"); do
    read -r b _ <<< "$(run "$kind" none)"
    read -r s acc <<< "$(run "$kind" spec)"
    base+=("$b"); spec+=("$s")
    same=$(python3 -c "import json,sys; t=lambda f:[json.loads(l)['text'] for l in open(f)]; print('identical' if t(sys.argv[1])==t(sys.argv[2]) else 'DIFFERENT')" "$work/out-none.jsonl" "$work/out-spec.jsonl")
    echo "$kind round $r: none $b tok/s, spec $s tok/s (accepted $acc%, texts $same)"
  done
  python3 -c "import statistics,sys; b=[float(x) for x in sys.argv[1].split()]; s=[float(x) for x in sys.argv[2].split()]; r=[y/x for x,y in zip(b,s)]; print(f'$kind c=$conc: median none {statistics.median(b):.1f} tok/s, spec {statistics.median(s):.1f} tok/s, ratio {statistics.median(s)/statistics.median(b):.2f}x; median of the rounds\' ratios {statistics.median(r):.3f}x, {sum(x >= 1 for x in r)} of {len(r)} rounds >= 1')" "${base[*]}" "${spec[*]}"
done
