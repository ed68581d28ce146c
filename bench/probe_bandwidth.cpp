// Measures the machine's sustained read bandwidth from DRAM: the ceiling of memory-bound decode
// (tokens/s <= bandwidth / bytes of weights read per token). Each thread streams its own slice
// of a buffer far larger than the last-level cache with AVX2 loads and independent XOR
// accumulators, the way a matmul streams weight rows; prints the median of R passes.
// Pages: 4k (ordinary pages, as a mapped GGUF file) and 2m (transparent huge pages, as kvasir's
// packed weights, src/core/huge_buffer.cpp): the 2m figure is the ceiling of a decode that reads
// packed weights. On a shared machine both move with the other tenants more than with the page
// size (docs/PERFORMANCE.md, session 23).
//
//   probe_bandwidth [MiB=1024] [threads=1,2] [passes=15] [pages=4k,2m]
#include <immintrin.h>
#include <sys/mman.h>

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

// GB/s of `passes` timed passes over buf by nt threads, each streaming its own slice.
std::vector<double> time_passes(const uint8_t* buf, size_t bytes, int nt, int passes, std::atomic<uint64_t>& sink) {
  std::vector<double> gbps;
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
  return gbps;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? size_t(std::atol(argv[1])) : 1024;
  std::vector<int> thread_counts;
  std::stringstream ss(argc > 2 ? argv[2] : "1,2");
  for (std::string item; std::getline(ss, item, ',');) thread_counts.push_back(std::atoi(item.c_str()));
  const int passes = argc > 3 ? std::atoi(argv[3]) : 15;
  std::vector<std::string> page_kinds;
  std::stringstream pk(argc > 4 ? argv[4] : "4k,2m");
  for (std::string item; std::getline(pk, item, ',');) page_kinds.push_back(item);
  for (const std::string& pages : page_kinds)
    if (pages != "4k" && pages != "2m") {
      std::fprintf(stderr, "pages must be 4k or 2m, not '%s'\n", pages.c_str());
      return 2;
    }

  const size_t huge_page = size_t(2) << 20, bytes = std::max(mib << 20, huge_page) / huge_page * huge_page;
  std::printf("buffer %zu MiB, %d passes, median\n", bytes >> 20, passes);
  std::atomic<uint64_t> sink{0};
  for (const std::string& pages : page_kinds) {
    void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
      std::perror("mmap");
      return 1;
    }
    (void)::madvise(map, bytes, pages == "2m" ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);  // a hint
    auto* buf = static_cast<uint8_t*>(map);
    std::memset(buf, 1, bytes);  // fault every page in before timing
    for (int nt : thread_counts) {
      const std::vector<double> gbps = time_passes(buf, bytes, nt, passes, sink);
      std::printf("pages %s, threads %d: read %.1f GB/s (min %.1f, max %.1f)  [sink %llx]\n", pages.c_str(), nt,
                  median(gbps), *std::min_element(gbps.begin(), gbps.end()),
                  *std::max_element(gbps.begin(), gbps.end()), (unsigned long long)(sink.load() & 0xf));
    }
    ::munmap(map, bytes);
  }
  return 0;
}
