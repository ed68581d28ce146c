#!/usr/bin/env bash
# End-to-end tests of `kvasir serve` with the real OpenAI Python client (pytest), the load generator
# and a headless-Chromium test of the web page. Creates tests/e2e/.venv (openai, ollama, jsonschema, pytest, selenium, langchain-openai)
# on first use. Exit code 77 (CTest: skipped) when the venv cannot be set up, e.g. offline.
#   tests/e2e/run.sh [path/to/kvasir] [pytest args...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${1:-${KVASIR_BIN:-$root/build/bin/kvasir}}"
shift || true
export KVASIR_BIN="$(realpath "$bin")"
export KVASIR_SOURCE_DIR="$root"
export KVASIR_SHARED_DIR="${KVASIR_SHARED_DIR:-$root/../shared}"

venv="$here/.venv"
mkdir -p "$venv"
exec 9>"$venv/.lock"
flock 9  # two test runs at once share one venv
# The marker names the package set: a venv made for an older set is topped up.
marker="$venv/.installed-openai-ollama-jsonschema-pytest-selenium-langchain"
if [ ! -f "$marker" ]; then
  python3 -m venv "$venv" || { echo "e2e: cannot create a virtual environment (python3-venv)" >&2; exit 77; }
  "$venv/bin/pip" install -q --disable-pip-version-check "openai>=1.0" ollama jsonschema pytest selenium \
    || { echo "e2e: cannot install openai, ollama, jsonschema, pytest and selenium from PyPI" >&2; exit 77; }
  # LangChain is optional: its tests skip without it.
  "$venv/bin/pip" install -q --disable-pip-version-check langchain-openai || echo "e2e: langchain-openai not installed" >&2
  touch "$marker"
fi
flock -u 9
cd "$here"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here" "$@"
