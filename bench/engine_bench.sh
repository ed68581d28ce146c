#!/usr/bin/env bash
# Serving-engine benchmarks (issue "serving engine"), both through `kvasir batch`:
#   1. offline throughput: N prompts batched (continuous batching) versus one at a time
#      (--max-seqs 1), aggregate generated tokens/s of each and the ratio (prompts of 32-160 tokens);
#   2. shared-prefix TTFT: Q requests that share a ~1000-token system prompt, run one at a time,
#      with the prefix cache (the first request is cold, the rest hit the cache) versus
#      --no-prefix-cache (every request prefills the whole prompt); median TTFT of each, ratio.
#
# With -r R, each throughput run is repeated R times, batched and one-by-one alternating, and the
# medians (and the median of the per-round ratios) are reported: this machine is noisy.
#
#   bench/engine_bench.sh [-b KVASIR] [-t THREADS] [-n PROMPTS] [-g GEN_TOKENS] [-q QUESTIONS] [-r ROUNDS] MODEL.gguf
set -euo pipefail
cd "$(dirname "$0")/.."
kvasir=build/bin/kvasir threads=2 n=64 gen=128 q=8 rounds=1
while getopts "b:t:n:g:q:r:" opt; do
  case $opt in b) kvasir=$OPTARG ;; t) threads=$OPTARG ;; n) n=$OPTARG ;; g) gen=$OPTARG ;; q) q=$OPTARG ;; r) rounds=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: $0 [-b KVASIR] [-t T] [-n PROMPTS] [-g GEN] [-q QUESTIONS] [-r ROUNDS] MODEL.gguf" >&2; exit 2; }
model=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Deterministic English-like text (no data files needed), sized with the model's own tokenizer:
# prompts of 32-160 tokens, and a shared system prompt of ~1000 tokens.
python3 - "$kvasir" "$model" "$tmp" "$n" "$gen" "$q" <<'PY'
import json, random, subprocess, sys
kvasir, model, tmp, n, gen, q = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
rng = random.Random(7)
words = ("the a of and to in is was for on with as by at from it that this which model engine token cache "
         "block batch server request stream memory weight layer kernel thread decode prefill prompt answer "
         "question system user river mountain city history science music garden window morning evening").split()
def count(text):
    out = subprocess.run([kvasir, "tokenize", "-m", model, "--json", "--text", text], capture_output=True, text=True, check=True)
    return len(json.loads(out.stdout))
def text(tokens, step=4):
    t = rng.choice(words).capitalize()
    while count(t) < tokens:
        t += " " + " ".join(rng.choice(words) for _ in range(step))
    return t + "."
with open(f"{tmp}/batch.jsonl", "w") as f:
    for i in range(n):
        f.write(json.dumps({"prompt": text(rng.randint(32, 160)), "max_tokens": gen, "temperature": 0,
                            "ignore_eos": True}) + "\n")
system = "You are a careful assistant. " + text(1000, step=40)
with open(f"{tmp}/prefix.jsonl", "w") as f:
    for i in range(q):
        f.write(json.dumps({"prompt": system + "\nQuestion " + str(i) + ": " + text(8) + "\nAnswer:",
                            "max_tokens": 4, "temperature": 0, "ignore_eos": True}) + "\n")
PY

run() {  # run NAME [batch flags...]: prints the summary line; results in $tmp/NAME.out
  local name=$1 input=$2
  shift 2
  "$kvasir" batch -m "$model" -t "$threads" --input "$tmp/$input" --output "$tmp/$name.out" "$@" 2>&1 >/dev/null |
    grep '^batch:' | tee "$tmp/$name.log"
}

echo "== offline throughput, $n prompts x $gen tokens, $(basename "$model"), $threads threads, $rounds round(s)"
for r in $(seq "$rounds"); do
  run "batched$r" batch.jsonl --max-seqs "$n"
  run "serial$r" batch.jsonl --max-seqs 1
done
echo "== shared-prefix TTFT, $q requests one at a time"
run warm prefix.jsonl --max-seqs 1
run cold prefix.jsonl --max-seqs 1 --no-prefix-cache

python3 - "$tmp" "$rounds" <<'PY'
import json, re, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
def tps(k): return float(re.search(r"([0-9.]+) tok/s", open(f"{tmp}/{k}.log").read()).group(1))
b = [tps(f"batched{r}") for r in range(1, rounds + 1)]
s = [tps(f"serial{r}") for r in range(1, rounds + 1)]
ratios = [x / y for x, y in zip(b, s)]
print(f"aggregate generation (median of {rounds}): batched {statistics.median(b):.1f} tok/s, "
      f"one by one {statistics.median(s):.1f} tok/s, ratio {statistics.median(ratios):.2f}x "
      f"(per round: {', '.join(f'{r:.2f}x' for r in ratios)})")
# Requests run one at a time, so TTFT counts from when a request is scheduled (ttft - queue):
# the prefill (or the cache hit) and the first token, without the wait behind earlier requests.
def ttfts(k): return [(t := json.loads(l)["timings"])["ttft_ms"] - t["queue_ms"] for l in open(f"{tmp}/{k}.out")]
def prompt_len(k): return json.loads(open(f"{tmp}/{k}.out").readline())["usage"]["prompt_tokens"]
warm, cold = ttfts("warm"), ttfts("cold")
w, c = statistics.median(warm[1:]), statistics.median(cold)
print(f"TTFT, {prompt_len('warm')}-token prompts: first (cold) {warm[0]:.1f} ms, warm median {w:.1f} ms; "
      f"no prefix cache median {c:.1f} ms; cold/warm {c / w:.1f}x")
PY
