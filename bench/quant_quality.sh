#!/usr/bin/env bash
# Quality of quantized files against their full-precision source, on held-out prose: mean KL
# divergence, same top-1 and PPL per type, in one table (docs/PERFORMANCE.md "Quantization").
#   bench/quant_quality.sh F32.gguf [TYPE ...]      (default: q4_0 q3_k_s q2_k q4_k_m)
# The evaluation text is the second half of Debian's FAQ (package debian-faq); the first half is
# kept for calibration, so that no method is scored on what it saw. Chunks of 256 tokens.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${KVASIR_BIN:-$here/../build/bin/kvasir}"
f32="$1"; shift
[ $# -gt 0 ] && types=("$@") || types=(q4_0 q3_k_s q2_k q4_k_m)
faq=/usr/share/doc/debian/FAQ/debian-faq.en.txt.gz
[ -f "$faq" ] || { echo "needs the debian-faq package (apt-get install debian-faq)" >&2; exit 1; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
zcat "$faq" > "$work/faq.txt"
half=$(( $(wc -c < "$work/faq.txt") / 2 ))
head -c "$half" "$work/faq.txt" > "$work/calibration.txt"
# (no pipe: head ending first would kill tail with SIGPIPE, fatal under pipefail)
tail -c +"$((half + 1))" "$work/faq.txt" > "$work/second-half.txt"
head -c "${EVAL_BYTES:-60000}" "$work/second-half.txt" > "$work/eval.txt"
echo "| type | method | file MiB | PPL | mean KLD | same top-1 |"
echo "|---|---|---:|---:|---:|---:|"
base=$("$bin" perplexity -m "$f32" -f "$work/eval.txt" -c 256 --json)
echo "| f32 | source | $(( $(stat -c %s "$f32") >> 20 )) | $(jq -r '.ppl|.*10000|round/10000' <<<"$base") | | |"
for t in "${types[@]}"; do
  "$bin" quantize "$f32" "$work/$t.gguf" "$t" 2>/dev/null
  r=$("$bin" perplexity -m "$work/$t.gguf" --kl-base "$f32" -f "$work/eval.txt" -c 256 --json)
  printf "| %s | RTN | %d | %.4f | %.4f | %.1f%% |\n" "$t" $(( $(stat -c %s "$work/$t.gguf") >> 20 )) \
    "$(jq -r .ppl <<<"$r")" "$(jq -r .kld.mean <<<"$r")" "$(jq -r '.same_top1*100' <<<"$r")"
done
