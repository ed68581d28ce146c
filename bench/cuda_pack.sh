#!/usr/bin/env bash
# Packs what bench/cuda_check.sh needs on a GPU machine without network access into one folder
# of the checkout, to be carried there (the device tool's 64 MiB limit counts it):
#   bench/cuda_pack.sh [DIR] [SHARED]      (defaults: .devdata, ../shared)
# DIR gets bin/ (kvasir and test_cuda, stripped), lib/ (the shared libraries they link beyond the
# C/C++ runtime: UCX, hiredis, PCRE2, OpenSSL, cpp-httplib, brotli, ...), models/ (the fixtures
# the CUDA tests name; the F32 ones only with PACK_F32=1) and golden/ (stories260K's greedy texts
# and the story text the speculation test distils a head from). DIR is added to .git/info/exclude. Then, on the GPU machine:
#   bench/cuda_check.sh DIR OUT DIR/bin
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.devdata} shared=${2:-../shared}
[ -x build/bin/kvasir ] && [ -x build/bin/test_cuda ] || { echo "build first: cmake --build build (with KVASIR_CUDA)"; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib" "$dir/models" "$dir/golden/models"
grep -qxF "/$dir/" .git/info/exclude 2>/dev/null || echo "/$dir/" >> .git/info/exclude
for b in kvasir test_cuda; do strip -o "$dir/bin/$b" "build/bin/$b"; done
# Every library the binaries load except the C/C++ runtime, which any Linux machine has.
ldd "$dir/bin/kvasir" "$dir/bin/test_cuda" | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$dir/lib/"; done
# The fixtures the CUDA tests name (stories260K is also what cuda_check.sh benches).
for name in $(grep -ohE '(fixture-[a-z0-9]+-[a-z0-9_]+|stories260K(-[a-z0-9_]+)?)' tests/cuda/*.cpp | sort -u); do
  case "$name" in *-f32) [ "${PACK_F32:-0}" = 1 ] || continue ;; esac
  [ -f "$shared/models/$name.gguf" ] && cp "$shared/models/$name.gguf" "$dir/models/"
done
cp "$shared"/golden/models/stories260K*.text.json "$dir/golden/models/" 2>/dev/null || true
mkdir -p "$dir/golden/perplexity"  # the text the speculation test distils its head from
cp "$shared"/golden/perplexity/stories-sampled.txt "$dir/golden/perplexity/" 2>/dev/null || true
du -sh "$dir"/*; du -sh "$dir"
echo "carry \"$dir\"; run: bench/cuda_check.sh $dir \$OUT $dir/bin"
