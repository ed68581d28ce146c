// Measures peak arithmetic throughput: the ceiling of compute-bound prefill. Two kernels per
// thread count, each a loop of independent chains long enough to hide latency:
//  - FP32 FMA (vfmadd231ps on 8 lanes, 2 FLOPs per lane): GFLOP/s;
//  - the int8 dot step the quantized kernels use (vpmaddubsw u8 x s8 -> s16 pairs, vpmaddwd
//    -> s32, vpaddd): GOP/s counting a multiply and an add per byte pair (64 per 32 bytes).
//
//   probe_fma [threads=1,2] [passes=9]
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kIters = 50'000'000;

// 12 accumulators: FMA latency 4 cycles x 2 pipes needs >= 8 in flight. Named registers (not
// an array) so the compiler cannot keep them in memory.
float fma_loop(float seed) {
  __m256 x0 = _mm256_set1_ps(seed), x1 = _mm256_set1_ps(seed + 1), x2 = _mm256_set1_ps(seed + 2),
         x3 = _mm256_set1_ps(seed + 3), x4 = _mm256_set1_ps(seed + 4), x5 = _mm256_set1_ps(seed + 5),
         x6 = _mm256_set1_ps(seed + 6), x7 = _mm256_set1_ps(seed + 7), x8 = _mm256_set1_ps(seed + 8),
         x9 = _mm256_set1_ps(seed + 9), x10 = _mm256_set1_ps(seed + 10), x11 = _mm256_set1_ps(seed + 11);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < kIters; ++i) {
#define KV_FMA(x) x = _mm256_fmadd_ps(x, a, b)
    KV_FMA(x0); KV_FMA(x1); KV_FMA(x2); KV_FMA(x3); KV_FMA(x4); KV_FMA(x5);
    KV_FMA(x6); KV_FMA(x7); KV_FMA(x8); KV_FMA(x9); KV_FMA(x10); KV_FMA(x11);
#undef KV_FMA
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                                 _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x4, x5), _mm256_add_ps(x6, x7)),
                                               _mm256_add_ps(_mm256_add_ps(x8, x9), _mm256_add_ps(x10, x11))));
  return _mm256_cvtss_f32(s);
}
constexpr double kFmaOps = 12.0 * 8 * 2;  // per iteration

// Only the accumulating add is loop-carried (1 cycle), so 4 accumulators suffice; 4 distinct
// unsigned operands keep the 8 multiplies per iteration independent without spilling.
int int8_loop(int seed) {
  __m256i s0 = _mm256_set1_epi32(seed), s1 = s0, s2 = s0, s3 = s0;
  __m256i u0 = _mm256_set1_epi8(7), u1 = _mm256_set1_epi8(8), u2 = _mm256_set1_epi8(9), u3 = _mm256_set1_epi8(10);
  const __m256i v = _mm256_set1_epi8(-3), w = _mm256_set1_epi8(5), ones = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < kIters; ++i) {
#define KV_DOT(s, u, v) s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, v), ones))
    KV_DOT(s0, u0, v); KV_DOT(s1, u1, v); KV_DOT(s2, u2, v); KV_DOT(s3, u3, v);
    KV_DOT(s0, u0, w); KV_DOT(s1, u1, w); KV_DOT(s2, u2, w); KV_DOT(s3, u3, w);
#undef KV_DOT
    // Keep the compiler from hoisting the (loop-invariant) products out of the loop.
    asm volatile("" : "+x"(u0), "+x"(u1), "+x"(u2), "+x"(u3));
  }
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(s0, s1), _mm256_add_epi32(s2, s3));
  return _mm256_extract_epi32(s, 0);
}
constexpr double kInt8Ops = 8.0 * 32 * 2;

template <typename Fn>
double run(int nt, Fn fn, double ops_per_iter) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<long long> sink{0};
  std::vector<double> seconds(static_cast<size_t>(nt));
  std::vector<std::thread> threads;
  for (int t = 0; t < nt; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) _mm_pause();
      const auto t0 = std::chrono::steady_clock::now();
      sink.fetch_add((long long)fn(t));
      seconds[size_t(t)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  while (ready.load() != nt) _mm_pause();
  go.store(true);
  for (auto& th : threads) th.join();
  return ops_per_iter * double(kIters) * nt / *std::max_element(seconds.begin(), seconds.end()) / 1e9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> thread_counts;
  std::stringstream ss(argc > 1 ? argv[1] : "1,2");
  for (std::string item; std::getline(ss, item, ',');) thread_counts.push_back(std::atoi(item.c_str()));
  const int passes = argc > 2 ? std::atoi(argv[2]) : 9;
  for (int nt : thread_counts) {
    std::vector<double> f, q;
    for (int p = 0; p < passes; ++p) {
      f.push_back(run(nt, [](int t) { return fma_loop(float(t)); }, kFmaOps));
      q.push_back(run(nt, [](int t) { return int8_loop(t); }, kInt8Ops));
    }
    std::printf("threads %d: fp32 FMA %.1f GFLOP/s, int8 maddubs+madd %.1f GOP/s (median of %d)\n", nt, median(f),
                median(q), passes);
  }
  return 0;
}
