#!/usr/bin/env bash
# Pruning on Gemma 3 270M (docs/PERFORMANCE.md "Pruning"): unstructured (magnitude vs Wanda at 50%,
# 2:4) and structured (2, 4, 6 layers removed by angular distance; 25% and 50% of the FFN channels
# removed), each scored on held-out text against the F32 model (mean KLD, same top-1, PPL), and the
# structurally pruned models' speed: each is quantized to Q4_K_M (RTN, as the unpruned one) and
# `kvasir bench` runs it beside the unpruned one, interleaved. ROWS="..." runs some rows only.
# Calibration: the first half of Debian's FAQ (8 chunks of 512 tokens); evaluation: 60,000 bytes of
# the second half in chunks of 256, as bench/calibrated_quality.sh.
#   bench/prune_quality.sh [F32.gguf]   (default: the default model dequantized to F32)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${KVASIR_BIN:-$here/../build/bin/kvasir}"
out="${OUT:-$here/out/prune}"; mkdir -p "$out"
f32="${1:-$out/gemma3-270m-f32.gguf}"
[ -f "$f32" ] || "$bin" quantize "$here/../models/gemma-3-270m-q4_k_m.gguf" "$f32" f32 --allow-requantize >/dev/null 2>&1
faq=/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz
[ -f "$faq" ] || { echo "needs the debian-faq package (apt-get install debian-faq)" >&2; exit 1; }
zcat "$faq" > "$out/faq.txt"
half=$(( $(wc -c < "$out/faq.txt") / 2 ))
head -c "$half" "$out/faq.txt" > "$out/calibration.txt"
tail -c +"$((half + 1))" "$out/faq.txt" > "$out/second-half.txt"
head -c "${EVAL_BYTES:-60000}" "$out/second-half.txt" > "$out/eval.txt"

row() {  # name, then prune's arguments
  local name="$1"; shift
  local start end
  start=$(date +%s.%N)
  "$bin" prune "$f32" "$out/$name.gguf" "$@" -f "$out/calibration.txt" --calib-chunks 8 -t 2 --json > "$out/$name.prune.json"
  end=$(date +%s.%N)
  "$bin" perplexity -m "$out/$name.gguf" --kl-base "$f32" -f "$out/eval.txt" -c 256 -t 2 --json > "$out/$name.ppl.json"
  python3 - "$name" "$out/$name.prune.json" "$out/$name.ppl.json" "$(echo "$end - $start" | bc)" <<'PY'
import json, sys
name, p, q, secs = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), float(sys.argv[4])
sp = p.get("sparsity")
print(f"| {name} | {p['layers_out']} | {'' if sp is None else f'{sp:.1%}'} | {p['bytes_out']/2**20:.0f} | "
      f"{q['ppl']:.3f} | {q['kld']['mean']:.4f} | {q['same_top1']:.1%} | {secs:.0f} |", flush=True)
PY
}

echo "| model | layers | zeroed | MiB | PPL | mean KLD | same top-1 | prune s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
"$bin" perplexity -m "$f32" -f "$out/eval.txt" -c 256 -t 2 --json > "$out/f32.ppl.json"
[ -n "${ROWS:-}" ] || python3 -c "import json; q=json.load(open('$out/f32.ppl.json')); print(f\"| F32 | 18 | | | {q['ppl']:.3f} | 0 | 100% | |\")"
for spec in ${ROWS:-magnitude-50 wanda-50 magnitude-2of4 wanda-2of4 layers-2 layers-4 layers-6 ffn-75 ffn-50}; do
  case "$spec" in
    magnitude-50) row "$spec" --method magnitude --sparsity 0.5 ;;
    wanda-50) row "$spec" --method wanda --sparsity 0.5 ;;
    magnitude-2of4) row "$spec" --method magnitude --nm 2:4 ;;
    wanda-2of4) row "$spec" --method wanda --nm 2:4 ;;
    layers-*) row "$spec" --remove-layers "${spec#layers-}" ;;
    ffn-75) row "$spec" --ffn-keep 0.75 ;;
    ffn-50) row "$spec" --ffn-keep 0.5 ;;
  esac
done

# Speed of the structurally pruned models, Q4_K_M, beside the unpruned one (interleaved rounds).
"$bin" quantize "$f32" "$out/full-q4_k_m.gguf" q4_k_m >/dev/null 2>&1
models=("$out/full-q4_k_m.gguf")
for name in layers-2 layers-4 layers-6 ffn-75 ffn-50; do
  [ -f "$out/$name.gguf" ] || continue
  "$bin" quantize "$out/$name.gguf" "$out/$name-q4_k_m.gguf" q4_k_m >/dev/null 2>&1
  models+=("$out/$name-q4_k_m.gguf")
done
echo
echo "| model (Q4_K_M) | pp512 tok/s | tg128 tok/s |"
echo "|---|---:|---:|"
for round in 1 2 3; do
  for m in "${models[@]}"; do
    "$bin" bench -m "$m" -p 512 -n 128 -r 3 -t 2 --json > "$out/$(basename "$m" .gguf).bench.$round.json"
  done
done
python3 - "${models[@]}" <<'PY'
import json, statistics, sys, os
for m in sys.argv[1:]:
    base = m[:-5]
    pp, tg = [], []
    for r in (1, 2, 3):
        for t in json.load(open(f"{base}.bench.{r}.json")):
            (pp if t["test"].startswith("pp") else tg).append(t["tokens_per_s"])
    print(f"| {os.path.basename(base)} | {statistics.median(pp):.1f} | {statistics.median(tg):.1f} |")
PY
