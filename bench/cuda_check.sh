#!/usr/bin/env bash
# The CUDA backend's one prepared check, for a GPU machine without network access (finishes in
# about 6 minutes on an H200):
#   bench/cuda_check.sh FIXTURES OUT [BIN]
# FIXTURES  a folder with models/ and golden/models/ laid out as ../shared (the fixture models and
#           stories260K's goldens; missing ones are skipped) and lib/ with any shared libraries the
#           binaries need there (cpp-httplib, brotli); BIN holds kvasir and test_cuda (build/bin).
# OUT       gets cuda_check.log: the machine, the CUDA tests, kvasir bench (pp512, tg128) on
#           stories260K and on synthetic Gemma 3 270M, TinyLlama 1.1B and Llama 3 8B shapes in
#           Q4_K_M with decode GB/s against the card's measured copy bandwidth, then `serve` under
#           the load generator at 1, 16 and 64 concurrent streams on the 1.1B shape.
set -uo pipefail
fx=${1:?fixtures folder} out=${2:?output folder} bin=${3:-build/bin}
mkdir -p "$out"
export LD_LIBRARY_PATH="$fx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVASIR_SHARED_DIR="$fx"
exec > >(tee "$out/cuda_check.log") 2>&1
step() { echo; echo "== $* ($(date +%T))"; }
kv="$bin/kvasir"
tmp=$(mktemp -d)

step machine
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
echo "cpus: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

step CUDA tests
timeout 300 "$bin/test_cuda" 2>&1 | grep -vE "^\[ +(RUN|OK) +\]" | tail -80
echo "test_cuda exit ${PIPESTATUS[0]}"

step synthetic models
for spec in gemma3-270m tinyllama-1.1b llama3-8b; do
  timeout 180 "$kv" synth --preset $spec --type q4_k_m -t "$(nproc)" -o "$tmp/$spec.gguf" 2>&1 | tail -1
done

bench() {  # model, extra flags
  step "bench $(basename "$1")"
  timeout 120 "$kv" bench -m "$1" --device cuda -t 4 -p 512 -n 128 -r 3 "${@:2}" 2>&1 | tail -12
}
bench "$fx/models/stories260K.gguf"
for spec in gemma3-270m tinyllama-1.1b llama3-8b; do
  [ -f "$tmp/$spec.gguf" ] && bench "$tmp/$spec.gguf"
done
step "decode at depth 4096 and without CUDA graphs (llama3-8b shape)"
if [ -f "$tmp/llama3-8b.gguf" ]; then
  timeout 120 "$kv" bench -m "$tmp/llama3-8b.gguf" --device cuda -t 4 -p 0 -n 128 -d 4096 -r 3 2>&1 | grep -E "tg|copy"
  KVASIR_CUDA_GRAPHS=0 timeout 60 "$kv" bench -m "$tmp/llama3-8b.gguf" --device cuda -t 4 -p 0 -n 128 -r 3 2>&1 | grep -E "tg|copy"
fi
[ "${CUDA_CHECK_QUICK:-0}" = 1 ] && { step done; rm -rf "$tmp"; exit 0; }

step "serve on cuda under the load generator (tinyllama-1.1b shape, 128 in / 128 out)"
if [ -f "$tmp/tinyllama-1.1b.gguf" ]; then
  "$kv" serve -m "$tmp/tinyllama-1.1b.gguf" --device cuda --port 18080 --max-seqs 64 -t 4 > "$out/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 60); do python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:18080/health', timeout=2)" 2>/dev/null && break; sleep 1; done
  timeout 150 "$kv" loadgen --url http://127.0.0.1:18080 --endpoint completions --concurrency 1,16,64 \
    --num-prompts 64 --input-len 128 --output-len 128 --warmup 2 2>&1 | tail -20
  kill $pid; wait $pid 2>/dev/null
  tail -5 "$out/serve.log"
fi
step done
rm -rf "$tmp"
