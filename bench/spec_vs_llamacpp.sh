#!/usr/bin/env bash
# Speculative decoding side by side with llama.cpp's own speculative paths, batch 1, greedy,
# rounds interleaved: `kvasir run --spec ngram` against `llama-lookup` on the copy-heavy prompt,
# and `kvasir run --draft-model D` against `llama-speculative-simple -md D` on the copy-heavy and
# a free-form prompt. K (draft tokens at most) is the same for both. Decode tokens/s as each tool
# prints it (after the prompt), medians over the rounds.
#   bench/spec_vs_llamacpp.sh [-r ROUNDS] [-n TOKENS] [-k K] [-t THREADS] [TARGET [DRAFT]]
# llama.cpp's tools come from bench/build_llamacpp.sh llama-lookup llama-speculative-simple.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/../build/bin/kvasir"
rounds=3 n=160 k=4 threads=2
while getopts "r:n:k:t:" o; do case $o in r) rounds=$OPTARG;; n) n=$OPTARG;; k) k=$OPTARG;; t) threads=$OPTARG;; *) exit 2;; esac; done
shift $((OPTIND - 1))
target="${1:-$here/../models/gemma-3-270m-q4_k_m.gguf}"
draft="${2:-$target}"
lbin="$("$here/build_llamacpp.sh" llama-lookup llama-speculative-simple)"
copy="Copy the text below exactly, word for word.

Text:
$(cat "$here/prompts/copy_heavy.txt")

Copy:
"
free="Once upon a time, in a small village by the mountains,"
kv() { "$bin" run -m "$target" -p "$1" -n "$n" --temp 0 -t "$threads" --spec-k "$k" "${@:2}" 2>&1 >/dev/null |
         grep -o "[0-9.]* tok/s after the first" | awk '{print $1}'; }
ll() { "$lbin/$1" -m "$target" -p "$2" -n "$n" --temp 0 -t "$threads" -c 4096 --spec-draft-n-max "$k" "${@:3}" 2>&1 |
         grep -o "decoded .*speed: *[0-9.]*" | awk '{print $NF}'; }
declare -A got
for r in $(seq "$rounds"); do
  got[lookup]+=" $(ll llama-lookup "$copy")";               got[ngram]+=" $(kv "$copy" --spec ngram)"
  got[ll_draft_copy]+=" $(ll llama-speculative-simple "$copy" -md "$draft" --spec-type draft-simple)"
  got[kv_draft_copy]+=" $(kv "$copy" --draft-model "$draft")"
  got[ll_draft_free]+=" $(ll llama-speculative-simple "$free" -md "$draft" --spec-type draft-simple)"
  got[kv_draft_free]+=" $(kv "$free" --draft-model "$draft")"
  echo "round $r: lookup${got[lookup]##* } ngram${got[ngram]##* } | copy: llama draft${got[ll_draft_copy]##* } kvasir draft${got[kv_draft_copy]##* } | free: llama draft${got[ll_draft_free]##* } kvasir draft${got[kv_draft_free]##* }"
done
med() { python3 -c "import statistics,sys; print(f'{statistics.median(float(x) for x in sys.argv[1:]):.1f}')" $1; }
echo "target $(basename "$target"), draft $(basename "$draft"), K $k, $n tokens, $threads threads, $rounds rounds (medians, decode tok/s):"
for pair in "lookup ngram copy, n-gram" "ll_draft_copy kv_draft_copy copy, draft model" "ll_draft_free kv_draft_free free, draft model"; do
  read -r a b label <<< "$pair"
  ma=$(med "${got[$a]}"); mb=$(med "${got[$b]}")
  echo "  $label: llama.cpp $ma, kvasir $mb, ratio $(python3 -c "print(f'{$mb/$ma:.2f}x')")"
done
