#!/usr/bin/env bash
# Builds llama.cpp's own tools (llama-server, llama-bench, llama-quantize, llama-imatrix,
# llama-perplexity, llama-speculative-simple, llama-lookup, ...) from the llama.cpp source that the
# PyPI sdist of llama-cpp-python vendors, for side-by-side comparisons on this machine. Nothing of
# it enters the repository: the source and the build live under bench/out/llamacpp.
#
#   bench/build_llamacpp.sh [TARGET ...]      (default: llama-server)
# Prints the bin directory. Set LLAMACPP_VERSION to pin another llama-cpp-python release.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${LLAMACPP_VERSION:-0.3.36}
root=bench/out/llamacpp
src=$root/llama_cpp_python-$version/vendor/llama.cpp
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(llama-server)
mkdir -p "$root"
if [ ! -f "$src/CMakeLists.txt" ]; then
  [ -x bench/.venv/bin/pip ] || python3 -m venv bench/.venv
  echo "build_llamacpp: fetching the llama-cpp-python $version sdist from PyPI" >&2
  bench/.venv/bin/pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$root" >&2
  tar -xzf "$root/llama_cpp_python-$version.tar.gz" -C "$root"
fi
build=$root/build-$version
# Native code without AMX: on a Sapphire Rapids host, -march=native turns on ggml's AMX matmul,
# whose first tile instruction dies with SIGILL as the model loads (llama-server 0.3.36, seen in
# session 37). kvasir uses no AMX either.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# Configured again when an older configuration left the examples (llama-lookup, ...) or AMX in.
if [ ! -f "$build/build.ninja" ] || grep -q "LLAMA_BUILD_EXAMPLES:BOOL=OFF" "$build/CMakeCache.txt" 2>/dev/null ||
   ! grep -q -- "-mno-amx-tile" "$build/CMakeCache.txt" 2>/dev/null; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" >&2
fi
ninja -C "$build" "${targets[@]}" >&2
echo "$build/bin"
