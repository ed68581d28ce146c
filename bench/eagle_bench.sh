#!/usr/bin/env bash
# A trained EAGLE-style draft head for Gemma 3 270M, end to end (docs/PERFORMANCE.md "Trained
# draft head"):
#   1. on-policy data: the target continues bench/prompts/distill_prompts.txt (SAMPLES samples per
#      prompt, temperature 0.8, top-p 0.95, 256 tokens) through `kvasir batch`; with GREEDY=1 the
#      first 24 words of each sample become an opening the target then continues greedily (224
#      tokens: the texts greedy decoding meets); the last 8 prompts' texts are held out;
#   2. `kvasir distill --head` on those texts (STEPS steps of 64 examples, 8192 head tokens, FFN 1024,
#      UNROLL draft positions trained per example);
#   3. bench/spec_bench.sh on the free-form prompts (none of them among the training prompts) at
#      concurrency 1, 4 and 16, with `--spec head --draft-head-file` against no speculation.
#   bench/eagle_bench.sh [MODEL]   (env: SAMPLES=4 GREEDY=1 STEPS=3000 UNROLL=1 LR=1e-3 CE=0 FFN=1024 ROUNDS=3 CONC="1 4 16" SKIP_DATA=1 SKIP_TRAIN=1 OUT=dir)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${KVASIR_BIN:-$here/../build/bin/kvasir}"
model="${1:-$here/../models/gemma-3-270m-q4_k_m.gguf}"
out="${OUT:-$here/out/eagle}"; mkdir -p "$out"
samples="${SAMPLES:-4}" steps="${STEPS:-3000}" rounds="${ROUNDS:-3}"
if [ -z "${SKIP_DATA:-}" ]; then
  python3 - "$here/prompts/distill_prompts.txt" "$samples" "$out" <<'PY'
import json, sys
prompts = [l.rstrip("\n") for l in open(sys.argv[1]) if l.strip()]
n, out = int(sys.argv[2]), sys.argv[3]
with open(f"{out}/gen.jsonl", "w") as f:
    for i, p in enumerate(prompts):
        for s in range(n):
            f.write(json.dumps({"prompt": p, "max_tokens": 256, "temperature": 0.8, "top_p": 0.95, "seed": 1000 * i + s,
                                "index": i}) + "\n")
PY
  start=$(date +%s)
  "$bin" batch -m "$model" -t 2 --input "$out/gen.jsonl" --output "$out/gen.out.jsonl" --max-seqs 16 --kv-mem 512M 2> "$out/gen.log" >/dev/null
  if [ -n "${GREEDY:-}" ]; then  # the sampled texts' first 24 words as openings, then greedy (as the bench decodes)
    python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/gen.out.jsonl")]
reqs = [json.loads(l) for l in open(f"{out}/gen.jsonl")]
with open(f"{out}/greedy.jsonl", "w") as f:
    for q, r in zip(reqs, rows):
        opening = q["prompt"] + " ".join(r["text"].split(" ")[:24])
        f.write(json.dumps({"prompt": opening, "max_tokens": 224, "temperature": 0, "index": q["index"]}) + "\n")
PY
    "$bin" batch -m "$model" -t 2 --input "$out/greedy.jsonl" --output "$out/greedy.out.jsonl" --max-seqs 16 --kv-mem 512M 2>> "$out/gen.log" >/dev/null
  fi
  echo "data: $(( $(date +%s) - start )) s ($(grep -o '[0-9.]* tok/s aggregate' "$out/gen.log" | tr '\n' ' '))" >&2
  python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
texts = []  # (prompt index, text)
for req, res in (("gen.jsonl", "gen.out.jsonl"), ("greedy.jsonl", "greedy.out.jsonl")):
    if not os.path.exists(f"{out}/{res}"):
        continue
    for q, r in zip((json.loads(l) for l in open(f"{out}/{req}")), (json.loads(l) for l in open(f"{out}/{res}"))):
        texts.append((q["index"], q["prompt"] + r["text"]))
last = max(i for i, _ in texts)
open(f"{out}/train.txt", "w").write("\n\n".join(t for i, t in texts if i <= last - 8) + "\n")
open(f"{out}/eval.txt", "w").write("\n\n".join(t for i, t in texts if i > last - 8) + "\n")
PY
fi
if [ -z "${SKIP_TRAIN:-}" ]; then
  "$bin" distill --teacher "$model" --head -o "$out/head.gguf" -f "$out/train.txt" --eval-text "$out/eval.txt" \
    --steps "$steps" --batch 64 --head-tokens 8192 --head-ffn "${FFN:-1024}" --lr "${LR:-1e-3}" --warmup 100 \
    --ce-weight "${CE:-0}" --unroll "${UNROLL:-1}" -c 512 -t 2 --json \
    > "$out/distill.json" 2> "$out/distill.log"
  python3 -c "import json; j=json.load(open('$out/distill.json')); print('distill:', json.dumps({k: j[k] for k in ('before','after','steps','train_tokens','teacher_seconds','train_seconds')}))"
fi
for c in ${CONC:-1 4 16}; do
  echo "concurrency $c:"
  "$here/spec_bench.sh" -r "$rounds" -c "$c" -w free -s "--spec head --draft-head-file $out/head.gguf" "$model"
done
