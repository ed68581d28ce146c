// Decode's weight reads and nothing else: one token's matmuls on a model-shaped stack of packed
// matrices, in layer order, split over the pool the way Forward::run_segments splits them
// (q/k/v in one pass, o, gate/up in one pass, down, then the output head). Against
// `kvasir bench -p 0` on the same shape it says how much of a decode token is its matmuls;
// against probe_bandwidth, how close the matmuls run to the memory. Timed ways, interleaved:
//   per pass  one parallel_for per pass, as decode runs (a barrier after each), its chunks at
//             least CHUNK KiB of weights as in Forward (several CHUNK values: one way each);
//   one sweep each thread walks its half of every matrix with no barrier (the barriers' cost).
// One weight type for every matrix (a Q4_K_M file mixes in Q6_K; a synth file of one type
// matches exactly). Random weights: the kernels' speed does not depend on their values.
//
//   gemv_stream_bench [type=q4_0] [threads=2] [passes=9] [n_embd=2048] [n_ff=5632] [n_layers=22]
//                     [kv_dim=256] [n_vocab=32000] [CHUNK KiB list=Forward's]   (defaults: the 1.1B shape)
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/quant/quant.h"
#include "model/forward.h"

using namespace kvasir;

namespace {

constexpr int64_t kGrain = 16;  // Forward::run_segments' grain

struct Matmul {
  kernels::PackedMatrix w;
  const uint8_t* act = nullptr;  // the quantized input row
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  auto arg = [&](int i, int64_t dflt) { return argc > i ? int64_t(std::atoll(argv[i])) : dflt; };
  const std::string type_name = argc > 1 ? argv[1] : "q4_0";
  const std::optional<DType> parsed = dtype_from_name(type_name);
  if (!parsed || kernels::pack_matrix_bytes(*parsed, 256, 8) == 0) {
    std::fprintf(stderr, "type '%s' has no packed decode panels in this build\n", type_name.c_str());
    return 2;
  }
  const DType t = *parsed;
  const int threads = int(arg(2, 2)), passes = int(arg(3, 9));
  const int64_t e = arg(4, 2048), f = arg(5, 5632), layers = arg(6, 22), kv = arg(7, 256), vocab = arg(8, 32000);
  std::vector<int64_t> chunk_kib;
  std::stringstream list(argc > 9 ? argv[9] : std::to_string(kLinearChunkMinBytes >> 10));
  for (std::string item; std::getline(list, item, ',');) chunk_kib.push_back(std::max<int64_t>(1, std::atoll(item.c_str())));

  // The passes of one token: each a list of (n_in, n_out) matrices that share one parallel_for.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> shape;
  for (int64_t l = 0; l < layers; ++l) {
    shape.push_back({{e, e}, {e, kv}, {e, kv}});
    shape.push_back({{e, e}});
    shape.push_back({{e, f}, {e, f}});
    shape.push_back({{f, e}});
  }
  shape.push_back({{e, vocab}});

  size_t total = 0;
  for (const auto& pass : shape)
    for (auto [n_in, n_out] : pass) total += kernels::pack_matrix_bytes(t, n_in, n_out);
  void* map = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return std::perror("mmap"), 1;
  (void)::madvise(map, total, MADV_HUGEPAGE);  // as the model's packed weights (core/huge_buffer.cpp)

  const auto* tr = kernels::quant_traits(t);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.f, 1.f);
  std::vector<float> x(size_t(std::max(e, f)));
  for (float& v : x) v = g(rng);
  std::vector<uint8_t> act_e(row_bytes(tr->vec_dot_type, e)), act_f(row_bytes(tr->vec_dot_type, f));
  kernels::quantize_activations(tr->vec_dot_type, x.data(), 1, e, act_e.data());
  kernels::quantize_activations(tr->vec_dot_type, x.data(), 1, f, act_f.data());

  // Every matrix is packed from the same quantized rows (x as weights): the bytes differ by
  // position only, which the kernels do not care about.
  std::vector<std::vector<Matmul>> stack;
  uint8_t* next = static_cast<uint8_t*>(map);
  std::vector<uint8_t> rows;
  for (const auto& pass : shape) {
    stack.emplace_back();
    for (auto [n_in, n_out] : pass) {
      rows.assign(row_bytes(t, n_in) * size_t(n_out), 0);
      for (int64_t o = 0; o < n_out; ++o) tr->quantize_row(x.data(), rows.data() + size_t(o) * row_bytes(t, n_in), n_in);
      Matmul m{kernels::pack_matrix_in(t, n_in, n_out, next), n_in == e ? act_e.data() : act_f.data()};
      kernels::pack_panels(m.w, rows.data(), 0, (n_out + 7) / 8);
      next += kernels::pack_matrix_bytes(t, n_in, n_out);
      stack.back().push_back(m);
    }
  }

  ThreadPool pool(threads);
  std::vector<float> y(size_t(std::max({e, f, vocab})));
  auto per_pass = [&](int64_t min_chunk_bytes) {
    for (const auto& pass : stack) {
      int64_t n = 0, bytes = 0;
      for (const Matmul& m : pass) n += m.w.n_out, bytes += int64_t(row_bytes(t, m.w.n_in)) * m.w.n_out;
      const int chunks = linear_chunks_per_thread(bytes, threads, min_chunk_bytes);
      pool.parallel_for(n, kGrain, [&](int64_t b, int64_t end, int) {
        int64_t offset = 0;
        for (const Matmul& m : pass) {
          const int64_t lo = std::max(b, offset), hi = std::min(end, offset + m.w.n_out);
          if (lo < hi) kernels::matmul_rows_packed(m.w, lo - offset, hi - offset, m.act, 1, y.data(), m.w.n_out);
          offset += m.w.n_out;
        }
      }, chunks);
    }
  };
  auto one_sweep = [&] {
    pool.parallel_for(threads, 1, [&](int64_t b, int64_t end, int) {
      for (int64_t part = b; part < end; ++part)
        for (const auto& pass : stack)
          for (const Matmul& m : pass) {
            const int64_t panels = (m.w.n_out + 7) / 8;
            const int64_t lo = std::min(m.w.n_out, panels * part / threads * 8);
            const int64_t hi = std::min(m.w.n_out, panels * (part + 1) / threads * 8);
            if (lo < hi) kernels::matmul_rows_packed(m.w, lo, hi, m.act, 1, y.data(), m.w.n_out);
          }
    }, 1);
  };

  // Way w < chunk_kib.size(): per pass with those chunks; the last way: one sweep.
  const size_t ways = chunk_kib.size() + 1;
  std::vector<std::vector<double>> gbps(ways);
  for (int p = 0; p < passes + 1; ++p) {  // round 0 warms up
    for (size_t w = 0; w < ways; ++w) {
      const auto t0 = std::chrono::steady_clock::now();
      w + 1 < ways ? per_pass(chunk_kib[w] << 10) : one_sweep();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (p > 0) gbps[w].push_back(double(total) / s / 1e9);
    }
  }
  std::printf("%s, %zu MB of packed weights a token, %d threads, median of %d\n", type_name.c_str(), total / 1000000,
              threads, passes);
  for (size_t w = 0; w < ways; ++w) {
    // Pass by pass against the first way: the machine's swings cancel in the ratio.
    std::vector<double> ratio;
    for (int p = 0; p < passes; ++p) ratio.push_back(gbps[w][size_t(p)] / gbps[0][size_t(p)]);
    const std::string name = w + 1 < ways ? "per pass, chunks >= " + std::to_string(chunk_kib[w]) + " KiB" : "one sweep";
    std::printf("%-28s %.1f GB/s (%.2f ms a token), %.3fx the first\n", (name + ":").c_str(), median(gbps[w]),
                double(total) / median(gbps[w]) / 1e6, median(ratio));
  }
  ::munmap(map, total);
  return 0;
}
