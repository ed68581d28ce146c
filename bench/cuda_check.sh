#!/usr/bin/env bash
# The CUDA backend's one prepared check, for a GPU machine without network access (about 6
# minutes on an H200 in session 25, before the launch knobs; estimated 8 with them: keep a 600 s
# limit in view, and CUDA_CHECK_QUICK=1 drops the serving part, about 2.5 minutes):
#   bench/cuda_check.sh FIXTURES OUT [BIN]
# FIXTURES  a folder with models/ and golden/models/ laid out as ../shared (the fixture models and
#           stories260K's goldens; missing ones are skipped) and lib/ with the shared libraries the
#           binaries need there; BIN holds kvasir and test_cuda (build/bin). bench/cuda_pack.sh
#           makes such a folder (its bin/ is BIN).
# OUT       gets cuda_check.log: the machine, the CUDA tests, kvasir bench (pp512, tg128) on
#           stories260K and on synthetic Gemma 3 270M, TinyLlama 1.1B and Llama 3 8B shapes in
#           Q4_K_M with decode GB/s against the card's measured copy bandwidth, then `serve` under
#           the load generator at 1, 16 and 64 concurrent streams on the 1.1B shape. Between them
#           (CUDA_CHECK_AB=0 skips it): the launch knobs side by side on the largest shape, and the
#           CUDA tests again with PDL on.
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
shapes=${CUDA_CHECK_SHAPES:-gemma3-270m tinyllama-1.1b llama3-8b}
last=${shapes##* }
for spec in $shapes; do
  timeout 180 "$kv" synth --preset $spec --type q4_k_m -t "$(nproc)" -o "$tmp/$spec.gguf" 2>&1 | tail -1
done

bench() {  # model, extra flags
  step "bench $(basename "$1")"
  timeout 120 "$kv" bench -m "$1" --device cuda -t 4 -p 512 -n 128 -r 3 "${@:2}" 2>&1 | tail -12
}
bench "$fx/models/stories260K.gguf"
for spec in $shapes; do
  [ -f "$tmp/$spec.gguf" ] && bench "$tmp/$spec.gguf"
done
step "decode at depth 4096 and without CUDA graphs (llama3-8b shape)"
if [ -f "$tmp/llama3-8b.gguf" ]; then
  timeout 120 "$kv" bench -m "$tmp/llama3-8b.gguf" --device cuda -t 4 -p 0 -n 128 -d 4096 -r 3 2>&1 | grep -E "tg|copy"
  KVASIR_CUDA_GRAPHS=0 timeout 60 "$kv" bench -m "$tmp/llama3-8b.gguf" --device cuda -t 4 -p 0 -n 128 -r 3 2>&1 | grep -E "tg|copy"
fi
# The launch knobs not yet run on a GPU (src/cuda/launch.cuh): each (unroll, PDL) pair on the
# largest shape, side by side. PDL must not change a logit: the same unroll gives the same hash
# with and without it (a race would not). Then the CUDA tests again under PDL with unroll 4.
if [ "${CUDA_CHECK_AB:-1}" = 1 ] && [ -f "$tmp/$last.gguf" ]; then
  step "launch knobs: KVASIR_CUDA_UNROLL x KVASIR_CUDA_PDL on the $last shape (pp512, tg128)"
  variants=${CUDA_CHECK_VARIANTS:-1/0 4/0 1/1 4/1 2/0}
  for v in $variants; do
    KVASIR_CUDA_UNROLL=${v%/*} KVASIR_CUDA_PDL=${v#*/} timeout 60 "$kv" bench -m "$tmp/$last.gguf" --device cuda -t 4 \
      -p 512 -n 128 -r 3 --csv > "$tmp/knob.csv" 2> "$tmp/knob.err"
    rc=$?
    grep -E "pp512|tg128" "$tmp/knob.csv" | sed "s|^|unroll/pdl $v,|"
    [ $rc = 0 ] || { echo "FAILED unroll/pdl $v: exit $rc"; tail -3 "$tmp/knob.err"; }
  done | tee "$out/knobs.csv"
  python3 - "$out/knobs.csv" $variants <<'PY'
import sys, collections
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.startswith("unroll/pdl") and l.count(",") >= 8]
by = collections.defaultdict(dict)
for r in rows:
    by[r[3]][r[0].split()[-1]] = (float(r[4]), r[-1])
for test in ("pp512", "tg128"):
    missing = [k for k in sys.argv[2:] if k not in by[test]]
    if missing: print(f"MISSING {test}: {' '.join(missing)} (a failed or killed run: see above)")
for test, v in by.items():
    base = v.get("1/0", (0, ""))[0]
    print(test, "  ".join(f"{k}: {t:.1f} t/s ({t / base:.3f}x)" if base else f"{k}: {t:.1f}" for k, (t, _) in v.items()))
    for k, (_, h) in v.items():
        other = v.get(k.split("/")[0] + "/0")
        if other and other[1] != h: print(f"  PDL CHANGED THE LOGITS at {test} {k}: {h} vs {other[1]}")
PY
  step "CUDA tests under KVASIR_CUDA_PDL=1 KVASIR_CUDA_UNROLL=4"
  KVASIR_CUDA_PDL=1 KVASIR_CUDA_UNROLL=4 timeout 300 "$bin/test_cuda" 2>&1 | grep -vE "^\[ +(RUN|OK) +\]" | tail -40
  echo "test_cuda (PDL, unroll 4) exit ${PIPESTATUS[0]}"
fi
if [ "${CUDA_CHECK_PROFILE:-0}" = 1 ] && command -v ncu > /dev/null && [ -f "$tmp/$last.gguf" ]; then
  step "ncu: one decode token of the $last shape, kernel by kernel"
  KVASIR_CUDA_GRAPHS=0 timeout 150 ncu --clock-control none --launch-skip ${NCU_SKIP:-400} --launch-count ${NCU_COUNT:-360} --csv \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum \
    "$kv" bench -m "$tmp/$last.gguf" --device cuda -t 4 -p 0 -n 4 -r 1 --no-warmup > "$out/ncu.csv" 2>&1
  python3 - "$out/ncu.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head = rows[0]; rows = rows[1:]
ki, mi, vi = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
t = collections.defaultdict(float); n = collections.Counter(); b = collections.defaultdict(float)
for r in rows:
    name = r[ki].split("(")[0][:60]
    v = float(r[vi].replace(",", ""))
    if r[mi] == "gpu__time_duration.sum": t[name] += v; n[name] += 1
    if r[mi] == "dram__bytes_read.sum": b[name] += v
tot = sum(t.values())
for k in sorted(t, key=t.get, reverse=True):
    print(f"{t[k]/1e3:9.1f} us {100*t[k]/tot:5.1f}%  x{n[k]:4d}  {b[k]/max(t[k],1):7.1f} GB/s  {k}")
print(f"total {tot/1e3:.1f} us over {sum(n.values())} kernels")
PY
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
