// Decode kernel speed per weight type, in bytes of packed weights a second: `rows` activation
// rows (1: decode; 2-8: a speculative verify step) against a matrix small enough to stay in L2 (the kernel's compute alone) and against one far
// larger than the caches (the kernel fed from memory), on huge pages like the model's weights.
// Types and the two sizes alternate pass by pass; ratios are taken pass by pass against the
// first type, so the machine's swings cancel in them.
//
//   panel_rate_bench [types=q4_0,q4_k,q6_k,q8_0] [threads=1] [passes=15] [cached KiB=256] [memory MiB=256]
//                    [n_in=2048] [rows=1]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/quant/quant.h"

using namespace kvasir;

namespace {

struct Case {
  DType type;
  std::string name;
  kernels::PackedMatrix cached, memory;
  std::vector<uint8_t> act;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A packed matrix of about `bytes` bytes on huge pages; its rows are x quantized.
kernels::PackedMatrix make_matrix(DType t, int64_t n_in, size_t bytes, const std::vector<float>& x) {
  const auto* tr = kernels::quant_traits(t);
  const int64_t n_out = std::max<int64_t>(8, int64_t(bytes / row_bytes(t, n_in)) / 8 * 8);
  const size_t total = kernels::pack_matrix_bytes(t, n_in, n_out);
  void* map = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) std::perror("mmap"), std::exit(1);
  (void)::madvise(map, total, MADV_HUGEPAGE);
  std::vector<uint8_t> rows(row_bytes(t, n_in) * size_t(n_out));
  for (int64_t o = 0; o < n_out; ++o)
    tr->quantize_row(x.data() + size_t(o % 7) * 8, rows.data() + size_t(o) * row_bytes(t, n_in), n_in);
  kernels::PackedMatrix m = kernels::pack_matrix_in(t, n_in, n_out, static_cast<uint8_t*>(map));
  kernels::pack_panels(m, rows.data(), 0, n_out / 8);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Case> cases;
  // n_in of every matrix (default: the 1.1B shape's n_embd), a whole number of 32-element blocks
  // (of 256 for the k-quants)
  const int64_t n_in = argc > 6 ? std::max<int64_t>(256, std::atoll(argv[6]) / 32 * 32) : 2048;
  std::stringstream list(argc > 1 ? argv[1] : "q4_0,q4_k,q6_k,q8_0");
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(size_t(n_in) + 64);
  for (float& v : x) v = g(rng);
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1, passes = argc > 3 ? std::atoi(argv[3]) : 15;
  const size_t cached_bytes = size_t(argc > 4 ? std::atoll(argv[4]) : 256) << 10;
  const size_t memory_bytes = size_t(argc > 5 ? std::atoll(argv[5]) : 256) << 20;
  const int64_t rows = argc > 7 ? std::clamp<int64_t>(std::atoll(argv[7]), 1, 64) : 1;
  std::vector<float> xs(size_t(rows * n_in));
  for (int64_t r = 0; r < rows; ++r)  // rows differ: shifted copies of x
    for (int64_t i = 0; i < n_in; ++i) xs[size_t(r * n_in + i)] = x[size_t((i + 7 * r) % n_in)];
  for (std::string item; std::getline(list, item, ',');) {
    const auto t = dtype_from_name(item);
    if (t && n_in % dtype_info(*t).block_size != 0) {
      std::fprintf(stderr, "type '%s' needs n_in in whole blocks of %lld\n", item.c_str(),
                   static_cast<long long>(dtype_info(*t).block_size));
      return 2;
    }
    if (!t || kernels::pack_matrix_bytes(*t, 256, 8) == 0) {
      std::fprintf(stderr, "type '%s' has no packed decode panels in this build\n", item.c_str());
      return 2;
    }
    Case c{*t, item, make_matrix(*t, n_in, cached_bytes, x), make_matrix(*t, n_in, memory_bytes, x), {}};
    const auto* tr = kernels::quant_traits(*t);
    c.act.resize(row_bytes(tr->vec_dot_type, n_in) * size_t(rows));
    kernels::quantize_activations(tr->vec_dot_type, xs.data(), rows, n_in, c.act.data());
    cases.push_back(std::move(c));
  }

  ThreadPool pool(threads);
  int64_t max_out = 0;
  for (const Case& c : cases) max_out = std::max({max_out, c.cached.n_out, c.memory.n_out});
  std::vector<float> y(static_cast<size_t>(max_out * rows));
  auto run = [&](const kernels::PackedMatrix& m, const uint8_t* act) {
    pool.parallel_for(m.n_out, 8, [&](int64_t b, int64_t e, int) {
      kernels::matmul_rows_packed(m, b, e, act, rows, y.data(), m.n_out);
    }, 1);
  };
  auto bytes_of = [](const Case& c, const kernels::PackedMatrix& m) {
    return double(kernels::pack_matrix_bytes(c.type, m.n_in, m.n_out));
  };
  // gbps[way][case][pass]; way 0 cached, 1 memory.
  std::vector<std::vector<std::vector<double>>> gbps(2, std::vector<std::vector<double>>(cases.size()));
  for (int p = 0; p < passes + 1; ++p) {  // pass 0 warms up
    for (size_t c = 0; c < cases.size(); ++c) {
      const Case& k = cases[c];
      const int reps = std::max(1, int(memory_bytes / bytes_of(k, k.cached)));
      auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) run(k.cached, k.act.data());
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (p > 0) gbps[0][c].push_back(reps * bytes_of(k, k.cached) / s / 1e9);
      t0 = std::chrono::steady_clock::now();
      run(k.memory, k.act.data());
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (p > 0) gbps[1][c].push_back(bytes_of(k, k.memory) / s / 1e9);
    }
  }
  std::printf("%lld row(s), n_in %lld, %d threads, median of %d passes (GB/s of packed weights; ratio to %s pass by pass)\n",
              static_cast<long long>(rows), static_cast<long long>(n_in), threads, passes, cases[0].name.c_str());
  std::printf("%-6s %22s %22s\n", "type", "cached", "from memory");
  for (size_t c = 0; c < cases.size(); ++c) {
    std::printf("%-6s", cases[c].name.c_str());
    for (int w = 0; w < 2; ++w) {
      std::vector<double> ratio;
      for (int p = 0; p < passes; ++p) ratio.push_back(gbps[w][c][size_t(p)] / gbps[w][0][size_t(p)]);
      std::printf("   %7.1f (%.3fx)      ", median(gbps[w][c]), median(ratio));
    }
    std::printf("\n");
  }
  return 0;
}
