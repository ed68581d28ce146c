#!/usr/bin/env bash
# The same `kvasir loadgen` sweep against `kvasir serve` and against llama.cpp's own server
# (llama-server with -np SLOTS parallel slots and continuous batching, built from the PyPI sdist
# by bench/build_llamacpp.sh when -l is not given), on one GGUF file with the same thread count,
# one server at a time. Prints each sweep's table and a Markdown comparison (output tok/s and P99
# TPOT/TTFT per concurrency); keeps JSON + SVGs in OUT.
#
#   bench/server_compare.sh [-b KVASIR] [-l LLAMA_SERVER] [-t THREADS] [-c 1,2,4,8,16] [-N PROMPTS] [-i IN]
#                           [-o OUT_TOKENS] [-s SLOTS] [-r ROUNDS] [-k "KVASIR SERVE FLAGS"] [-d OUT] MODEL.gguf
#
# -r ROUNDS interleaved rounds per concurrency (default 2; medians reported).
# -k passes extra flags to `kvasir serve` (e.g. "--tpot-target 15").
set -euo pipefail
cd "$(dirname "$0")/.."
kvasir=build/bin/kvasir llama_server= threads=2 conc=1,2,4,8,16 num=32 in=128 out=64 slots=16 rounds=2 dir=bench/out/server extra=
while getopts "b:l:t:c:N:i:o:s:r:d:k:" opt; do
  case $opt in
    b) kvasir=$OPTARG ;; l) llama_server=$OPTARG ;; t) threads=$OPTARG ;; c) conc=$OPTARG ;; N) num=$OPTARG ;; i) in=$OPTARG ;;
    o) out=$OPTARG ;; s) slots=$OPTARG ;; r) rounds=$OPTARG ;; d) dir=$OPTARG ;; k) extra=$OPTARG ;; *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: $0 [-b KVASIR] [-t T] [-c LIST] [-N PROMPTS] [-i IN] [-o OUT] [-d DIR] MODEL.gguf" >&2; exit 2; }
model=$1
mkdir -p "$dir/kvasir" "$dir/llamacpp"

if [ -z "$llama_server" ]; then
  llama_server="$(bench/build_llamacpp.sh llama-server)/llama-server"
fi

# Text prompts of ~IN tokens, sized with this model's own tokenizer, so both servers see the same
# token counts.
[ -s "$dir/prompts.jsonl" ] || python3 - "$kvasir" "$model" "$in" "$num" "$dir/prompts.jsonl" <<'PY'
import json, random, subprocess, sys
kvasir, model, n_in, num, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rng = random.Random(3)
words = ("the a of and to in is was for on with as by at from it that this which model engine token cache block "
         "batch server request stream memory weight layer kernel thread river mountain city history science").split()
def run(*args):
    return subprocess.run([kvasir, *args, "-m", model], capture_output=True, text=True, check=True).stdout
with open(path, "w") as f:
    for i in range(num + 4):  # + warm-up requests
        text = f"Request {i}:" + "".join(" " + rng.choice(words) for _ in range(2 * n_in))
        ids = json.loads(run("tokenize", "--json", "--no-bos", "--text", text))[:n_in]  # cut at IN tokens
        f.write(json.dumps({"prompt": run("detokenize", "--ids", ",".join(map(str, ids)))}) + "\n")
PY

kport=$((20000 + RANDOM % 20000)) lport=$((kport + 1))
kpid= lpid=
cleanup() { for p in $kpid $lpid; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
wait_up() {  # wait_up PORT PID
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/v1/models" >/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "server exited" >&2; return 1; }
    sleep 0.5
  done
  return 1
}
point() {  # point NAME PORT CONCURRENCY ROUND: one loadgen run
  "$kvasir" loadgen --url "http://127.0.0.1:$2" --concurrency "$3" --num-prompts "$num" \
    --dataset jsonl --prompt-file "$dir/prompts.jsonl" --output-len "$out" --warmup 2 --seed 1 \
    --result-json "$dir/$1/c$3-r$4.json" --table "$dir/$1/c$3-r$4.md" --percentiles 50,99 --timeout 600 >&2
}

# Both servers stay up; each concurrency is measured on one, then the other, ROUNDS times
# (interleaved, so that the machine's drift hits both alike); the table reports medians.
echo "== kvasir serve ($(basename "$model"), $threads threads, --max-seqs $slots)" >&2
# shellcheck disable=SC2086  # $extra is a list of flags
"$kvasir" serve -m "$model" -t "$threads" --port "$kport" --max-seqs "$slots" $extra >"$dir/kvasir/server.log" 2>&1 &
kpid=$!
wait_up "$kport" "$kpid"
echo "== llama-server -np $slots ($(basename "$model"), $threads threads)" >&2
"$llama_server" -m "$model" -t "$threads" -tb "$threads" -np "$slots" -c $((slots * 1024)) --port "$lport" \
  --alias model >"$dir/llamacpp/server.log" 2>&1 &
lpid=$!
wait_up "$lport" "$lpid"
for c in ${conc//,/ }; do
  for r in $(seq "$rounds"); do
    point kvasir "$kport" "$c" "$r"
    point llamacpp "$lport" "$c" "$r"
  done
done
cleanup

python3 - "$dir" "$conc" "$rounds" <<'PY'
import json, statistics, sys
d, conc, rounds = sys.argv[1], [int(c) for c in sys.argv[2].split(",")], int(sys.argv[3])
def runs(name, c):
    out = []
    for r in range(1, rounds + 1):
        x = json.load(open(f"{d}/{name}/c{c}-r{r}.json"))
        x = x["runs"][0] if isinstance(x, dict) and "runs" in x else (x[0] if isinstance(x, list) else x)
        if x["failed"]: print(f"note: {name} c={c} round {r}: {x['failed']} failed: {sorted(set(e for e in x.get('errors', []) if e))[:3]}")
        out.append(x)
    return out
med = lambda xs, k: statistics.median(x[k] for x in xs)
print(f"medians of {rounds} interleaved rounds")
print("| concurrency | kvasir out tok/s | llama-server out tok/s | ratio | kvasir P99 TPOT ms | llama-server P99 TPOT ms | kvasir P99 TTFT ms | llama-server P99 TTFT ms |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in conc:
    a, b = runs("kvasir", c), runs("llamacpp", c)
    ka, kb = med(a, "output_throughput"), med(b, "output_throughput")
    print(f"| {c} | {ka:.1f} | {kb:.1f} | {ka / kb:.2f}x | {med(a, 'p99_tpot_ms'):.1f} | {med(b, 'p99_tpot_ms'):.1f} "
          f"| {med(a, 'p99_ttft_ms'):.0f} | {med(b, 'p99_ttft_ms'):.0f} |")
PY
