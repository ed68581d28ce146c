#!/usr/bin/env bash
# The same `kvasir loadgen` sweep against `kvasir serve` and against llama.cpp's OpenAI-compatible
# server from PyPI (llama-cpp-python[server], installed into bench/.venv when missing), on one
# GGUF file with the same thread count, one server at a time. Prints each sweep's table and a
# Markdown comparison (output tok/s and P99 TPOT per concurrency); keeps JSON + SVGs in OUT.
#
#   bench/server_compare.sh [-b KVASIR] [-t THREADS] [-c 1,2,4,8,16] [-N PROMPTS] [-i IN] [-o OUT_TOKENS]
#                           [-s SLOTS] [-k "KVASIR SERVE FLAGS"] [-L] [-d OUT] MODEL.gguf
#
# -k passes extra flags to `kvasir serve` (e.g. "--tpot-target 15"); -L skips the llama.cpp sweep
# and compares against the result.json an earlier run left in OUT/llamacpp.
#
# Note: llama-cpp-python's server runs one completion at a time (no parallel slots; by default a
# new request would even interrupt the running one, hence --interrupt_requests false); the native
# llama-server with -np is not on PyPI, so it is not what this compares against.
set -euo pipefail
cd "$(dirname "$0")/.."
kvasir=build/bin/kvasir threads=2 conc=1,2,4,8,16 num=32 in=128 out=64 slots=16 dir=bench/out/server extra= skip_peer=
while getopts "b:t:c:N:i:o:s:d:k:L" opt; do
  case $opt in
    b) kvasir=$OPTARG ;; t) threads=$OPTARG ;; c) conc=$OPTARG ;; N) num=$OPTARG ;; i) in=$OPTARG ;;
    o) out=$OPTARG ;; s) slots=$OPTARG ;; d) dir=$OPTARG ;; k) extra=$OPTARG ;; L) skip_peer=1 ;; *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: $0 [-b KVASIR] [-t T] [-c LIST] [-N PROMPTS] [-i IN] [-o OUT] [-d DIR] MODEL.gguf" >&2; exit 2; }
model=$1
mkdir -p "$dir/kvasir" "$dir/llamacpp"

if [ -z "$skip_peer" ] && ! bench/.venv/bin/python -c "import llama_cpp.server.app" 2>/dev/null; then
  [ -x bench/.venv/bin/python ] || python3 -m venv bench/.venv
  echo "installing llama-cpp-python[server] (builds llama.cpp from source when not yet installed)..." >&2
  CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_BLAS=OFF" bench/.venv/bin/pip install -q "llama-cpp-python[server]"
fi

# Text prompts of ~IN tokens (llama-cpp-python's server takes no token-id prompts), sized with
# this model's own tokenizer, so both servers see the same token counts.
[ -n "$skip_peer" ] && [ -s "$dir/prompts.jsonl" ] || python3 - "$kvasir" "$model" "$in" "$num" "$dir/prompts.jsonl" <<'PY'
import json, random, subprocess, sys
kvasir, model, n_in, num, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rng = random.Random(3)
words = ("the a of and to in is was for on with as by at from it that this which model engine token cache block "
         "batch server request stream memory weight layer kernel thread river mountain city history science").split()
def count(text):
    out = subprocess.run([kvasir, "tokenize", "-m", model, "--json", "--text", text], capture_output=True, text=True, check=True)
    return len(json.loads(out.stdout))
with open(path, "w") as f:
    for i in range(num + 4):  # + warm-up requests
        text = f"Request {i}:"
        while count(text) < n_in:
            text += " " + rng.choice(words)
        f.write(json.dumps({"prompt": text}) + "\n")
PY

port=$((20000 + RANDOM % 20000))
pid=
cleanup() { [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; }
trap cleanup EXIT
wait_up() {
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "server exited" >&2; return 1; }
    sleep 0.5
  done
  return 1
}
sweep() {  # sweep NAME: loadgen against the server on $port
  "$kvasir" loadgen --url "http://127.0.0.1:$port" --concurrency "$conc" --num-prompts "$num" \
    --dataset jsonl --prompt-file "$dir/prompts.jsonl" --output-len "$out" --warmup 2 --seed 1 --result-json "$dir/$1/result.json" \
    --table "$dir/$1/table.md" --svg-dir "$dir/$1" --percentiles 50,99 --timeout 600 --detailed >&2
}

echo "== kvasir serve ($(basename "$model"), $threads threads)" >&2
# shellcheck disable=SC2086  # $extra is a list of flags
"$kvasir" serve -m "$model" -t "$threads" --port "$port" --max-seqs "$slots" $extra >"$dir/kvasir/server.log" 2>&1 &
pid=$!
wait_up
sweep kvasir
cleanup
wait "$pid" 2>/dev/null || true

if [ -z "$skip_peer" ]; then
  port=$((port + 1))  # the first server's socket may linger
  echo "== llama-cpp-python server ($(basename "$model"), $threads threads)" >&2
  bench/.venv/bin/python -m llama_cpp.server --model "$model" --n_threads "$threads" --n_threads_batch "$threads" \
    --n_ctx 4096 --flash_attn true --interrupt_requests false --port "$port" --model_alias model >"$dir/llamacpp/server.log" 2>&1 &
  pid=$!
  wait_up
  sweep llamacpp
  cleanup
fi

python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
def load(name):
    r = json.load(open(f"{d}/{name}/result.json"))
    runs = r["runs"] if isinstance(r, dict) and "runs" in r else r
    return {x["max_concurrency"]: x for x in runs}
k, l = load("kvasir"), load("llamacpp")
print("| concurrency | kvasir out tok/s | llama.cpp out tok/s | ratio | kvasir P99 TPOT ms | llama.cpp P99 TPOT ms | kvasir P99 TTFT ms | llama.cpp P99 TTFT ms |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
for c in sorted(k):
    a, b = k[c], l.get(c)
    if not b: continue
    for name, x in (("kvasir", a), ("llama.cpp", b)):
        if x["failed"]: print(f"note: {name} c={c}: {x['failed']} failed: {sorted(set(e for e in x.get('errors', []) if e))[:3]}")
    print(f"| {c} | {a['output_throughput']:.1f} | {b['output_throughput']:.1f} | {a['output_throughput'] / b['output_throughput']:.2f}x "
          f"| {a['p99_tpot_ms']:.1f} | {b['p99_tpot_ms']:.1f} | {a['p99_ttft_ms']:.0f} | {b['p99_ttft_ms']:.0f} |")
PY
