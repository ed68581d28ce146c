// Microbenchmarks of the quantized kernels (Google Benchmark): vec_dot (SIMD) against its
// scalar twin per weight type, the activation quantizers, and matmul_rows on a 4096 x 4096
// matrix (one token: the direct tiles; 8 and 64 rows: the packed-panel prefill tiles).
//   cmake -S . -B build-perf -G Ninja -DKVASIR_BENCH=ON && ninja -C build-perf vec_dot_bench
//   build-perf/bin/vec_dot_bench --benchmark_filter=matmul
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/quant/quant.h"

using namespace kvasir;

namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g(rng);
  return v;
}

std::vector<uint8_t> convert(DType t, const std::vector<float>& x, int64_t n_rows, int64_t n) {
  std::vector<uint8_t> out(row_bytes(t, n) * size_t(n_rows));
  kernels::quantize_activations(t, x.data(), n_rows, n, out.data());
  return out;
}

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0,
                        DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

void bm_vec_dot(benchmark::State& state, DType t, bool simd) {
  const int64_t n = 4096;
  const auto* tr = kernels::quant_traits(t);
  // Weights via the reference quantizer (quantize_activations would work too, but this is the
  // file path).
  const auto wf = random_floats(n, 1);
  std::vector<uint8_t> w(row_bytes(t, n));
  tr->quantize_row(wf.data(), w.data(), n);
  const auto a = convert(tr->vec_dot_type, random_floats(n, 2), 1, n);
  const auto fn = simd ? tr->vec_dot : tr->vec_dot_ref;
  for (auto _ : state) benchmark::DoNotOptimize(fn(n, w.data(), a.data()));
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * int64_t(w.size()));
}

void bm_quantize_act(benchmark::State& state, DType t, bool fast) {
  const int64_t n = 4096;
  const auto* tr = kernels::quant_traits(t);
  const auto x = random_floats(n, 3);
  std::vector<uint8_t> out(row_bytes(t, n));
  const auto fn = fast ? tr->quantize_row_fast : tr->quantize_row;
  for (auto _ : state) {
    fn(x.data(), out.data(), n);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void bm_matmul(benchmark::State& state, DType t) {
  const int64_t n_in = 4096, n_out = 4096, rows = state.range(0);
  const auto* tr = kernels::quant_traits(t);
  std::vector<uint8_t> w(row_bytes(t, n_in) * n_out);
  const auto wf = random_floats(n_in, 4);
  for (int64_t o = 0; o < n_out; ++o) tr->quantize_row(wf.data(), w.data() + o * row_bytes(t, n_in), n_in);
  const auto a = convert(tr->vec_dot_type, random_floats(n_in * rows, 5), rows, n_in);
  std::vector<float> y(size_t(rows * n_out));
  for (auto _ : state) {
    kernels::matmul_rows(t, w.data(), n_in, 0, n_out, a.data(), rows, y.data(), n_out);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n_in * n_out * rows);
  state.SetBytesProcessed(state.iterations() * int64_t(w.size()));
}

const int kRegistered = [] {
  for (DType t : kTypes) {
    const std::string name(dtype_name(t));
    benchmark::RegisterBenchmark(("vec_dot/" + name).c_str(), bm_vec_dot, t, true);
    benchmark::RegisterBenchmark(("vec_dot_ref/" + name).c_str(), bm_vec_dot, t, false);
  }
  for (DType t : {DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::F16}) {
    const std::string name(dtype_name(t));
    benchmark::RegisterBenchmark(("quantize_fast/" + name).c_str(), bm_quantize_act, t, true);
    benchmark::RegisterBenchmark(("quantize_ref/" + name).c_str(), bm_quantize_act, t, false);
  }
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16})
    benchmark::RegisterBenchmark(("matmul_4096x4096/" + std::string(dtype_name(t))).c_str(), bm_matmul, t)
        ->Arg(1)
        ->Arg(8)
        ->Arg(64)
        ->Unit(benchmark::kMillisecond);
  return 0;
}();

}  // namespace

BENCHMARK_MAIN();
