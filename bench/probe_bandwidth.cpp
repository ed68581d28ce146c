// Measures the machine's sustained read bandwidth from DRAM: the ceiling of memory-bound decode
// (tokens/s <= bandwidth / bytes of weights read per token). Each thread streams its own slice
// of a buffer far larger than the last-level cache with AVX2 loads and independent XOR
// accumulators, the way a matmul streams weight rows; prints the median of R passes.
//
//   probe_bandwidth [MiB=1024] [threads=1,2] [passes=15]
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

// XOR of every 32-byte word in [p, p + bytes): 8 accumulators keep 8 loads in flight per cycle.
uint64_t read_slice(const uint8_t* p, size_t bytes) {
  __m256i acc[8];
  for (auto& a : acc) a = _mm256_setzero_si256();
  const auto* v = reinterpret_cast<const __m256i*>(p);
  const size_t n = bytes / 32;
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_xor_si256(acc[k], _mm256_load_si256(v + i + k));
  for (int k = 1; k < 8; ++k) acc[0] = _mm256_xor_si256(acc[0], acc[k]);
  return uint64_t(_mm256_extract_epi64(acc[0], 0) ^ _mm256_extract_epi64(acc[0], 3));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? size_t(std::atol(argv[1])) : 1024;
  std::vector<int> thread_counts;
  std::stringstream ss(argc > 2 ? argv[2] : "1,2");
  for (std::string item; std::getline(ss, item, ',');) thread_counts.push_back(std::atoi(item.c_str()));
  const int passes = argc > 3 ? std::atoi(argv[3]) : 15;

  const size_t bytes = mib << 20;
  auto* buf = static_cast<uint8_t*>(std::aligned_alloc(4096, bytes));
  std::memset(buf, 1, bytes);  // fault every page in before timing
  std::printf("buffer %zu MiB, %d passes, median\n", mib, passes);
  for (int nt : thread_counts) {
    std::vector<double> gbps;
    std::atomic<uint64_t> sink{0};
    for (int pass = 0; pass < passes + 1; ++pass) {  // pass 0 warms up
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      std::vector<std::thread> threads;
      const size_t slice = bytes / size_t(nt) / 4096 * 4096;
      std::vector<double> seconds(static_cast<size_t>(nt));
      for (int t = 0; t < nt; ++t) {
        threads.emplace_back([&, t] {
          ready.fetch_add(1);
          while (!go.load()) _mm_pause();
          const auto t0 = std::chrono::steady_clock::now();
          sink.fetch_xor(read_slice(buf + size_t(t) * slice, slice));
          seconds[size_t(t)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        });
      }
      while (ready.load() != nt) _mm_pause();
      go.store(true);
      for (auto& th : threads) th.join();
      // All threads started together; the slowest one bounds the pass.
      const double sec = *std::max_element(seconds.begin(), seconds.end());
      if (pass > 0) gbps.push_back(double(slice) * nt / sec / 1e9);
    }
    std::printf("threads %d: read %.1f GB/s (min %.1f, max %.1f)  [sink %llx]\n", nt, median(gbps),
                *std::min_element(gbps.begin(), gbps.end()), *std::max_element(gbps.begin(), gbps.end()),
                (unsigned long long)(sink.load() & 0xf));
  }
  std::free(buf);
  return 0;
}
