#!/usr/bin/env bash
# Calibrated quantization against RTN and against llama.cpp's own imatrix quantization, on Gemma 3
# 270M F32 (docs/PERFORMANCE.md "GPTQ"): per type, the held-out mean KLD, same top-1 and PPL of
#   rtn          kvasir quantize (no calibration)
#   llama-imat   llama-imatrix + llama-quantize --imatrix (built by bench/build_llamacpp.sh)
#   gptq         kvasir quantize --method gptq
# Calibration is the first half of Debian's FAQ (32 chunks of 512 tokens), evaluation 60,000 bytes
# of the second half in chunks of 256, as in bench/quant_quality.sh. Also checks that llama.cpp
# loads every kvasir file (llama-perplexity over the first chunks).
#   bench/calibrated_quality.sh F32.gguf [TYPE ...] [-- METHOD ...]   (default q4_0 q3_k_s q2_k)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${KVASIR_BIN:-$here/../build/bin/kvasir}"
f32="$1"; shift
types=(); methods=(rtn llama-imat gptq)
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; methods=("$@"); break; fi
  types+=("$1"); shift
done
[ ${#types[@]} -gt 0 ] || types=(q4_0 q3_k_s q2_k)
out="${OUT:-$here/out/calibrated}"; mkdir -p "$out"
faq=/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz
[ -f "$faq" ] || { echo "needs the debian-faq package (apt-get install debian-faq)" >&2; exit 1; }
zcat "$faq" > "$out/faq.txt"
half=$(( $(wc -c < "$out/faq.txt") / 2 ))
head -c "$half" "$out/faq.txt" > "$out/calibration.txt"
# (no pipe: head ending first would kill tail with SIGPIPE, fatal under pipefail)
tail -c +"$((half + 1))" "$out/faq.txt" > "$out/second-half.txt"
head -c "${EVAL_BYTES:-60000}" "$out/second-half.txt" > "$out/eval.txt"
llama=""
if [[ " ${methods[*]} " == *" llama-imat "* ]]; then
  llama="$("$here/build_llamacpp.sh" llama-imatrix llama-quantize llama-perplexity)"
  [ -f "$out/llama-imatrix.gguf" ] || "$llama/llama-imatrix" -m "$f32" -f "$out/calibration.txt" -o "$out/llama-imatrix.gguf" \
    -c 512 --chunks 32 -b 512 --no-ppl -t 2 > "$out/llama-imatrix.log" 2>&1
fi
if [ -n "$llama" ]; then  # llama.cpp's PPL of the source over the chunks its load check reads
  "$llama/llama-perplexity" -m "$f32" -f "$out/eval.txt" -c 256 --chunks 4 -t 2 > "$out/f32.llama-ppl.log" 2>&1
  grep -o "Final estimate: PPL = [0-9.]*" "$out/f32.llama-ppl.log" | sed "s|^|  llama.cpp, the F32 source: |" >&2
fi
echo "| type | method | file MiB | PPL | mean KLD | same top-1 | quantize s |"
echo "|---|---|---:|---:|---:|---:|---:|"
for t in "${types[@]}"; do
  for m in "${methods[@]}"; do
    f="$out/$t-$m.gguf"
    start=$(date +%s.%N)
    case "$m" in
      rtn) "$bin" quantize "$f32" "$f" "$t" -t 2 2>"$f.log" ;;
      llama-imat) "$llama/llama-quantize" --imatrix "$out/llama-imatrix.gguf" "$f32" "$f" "$t" 2 >"$f.log" 2>&1 ;;
      gptq) "$bin" quantize "$f32" "$f" "$t" -t 2 --method gptq --calib-text "$out/calibration.txt" --calib-chunks 32 2>"$f.log" ;;
      *) "$bin" quantize "$f32" "$f" "$t" -t 2 --method "$m" --calib-text "$out/calibration.txt" --calib-chunks 32 2>"$f.log" ;;
    esac
    secs=$(echo "$(date +%s.%N) - $start" | bc)
    r=$("$bin" perplexity -m "$f" --kl-base "$f32" -f "$out/eval.txt" -c 256 -t 2 --json 2>/dev/null)
    printf "| %s | %s | %d | %.4f | %.4f | %.1f%% | %.1f |\n" "$t" "$m" $(( $(stat -c %s "$f") >> 20 )) \
      "$(jq -r .ppl <<<"$r")" "$(jq -r .kld.mean <<<"$r")" "$(jq -r '.same_top1*100' <<<"$r")" "$secs"
    if [ -n "$llama" ] && [ "$m" != llama-imat ]; then  # llama.cpp loads kvasir's file
      "$llama/llama-perplexity" -m "$f" -f "$out/eval.txt" -c 256 --chunks 4 -t 2 > "$f.llama-ppl.log" 2>&1 \
        && grep -o "Final estimate: PPL = [0-9.]*" "$f.llama-ppl.log" | sed "s|^|  llama.cpp loads $t-$m: |" >&2 \
        || echo "  llama.cpp FAILED to load $t-$m (see $f.llama-ppl.log)" >&2
    fi
  done
done
