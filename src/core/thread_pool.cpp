#include "core/thread_pool.h"

#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#define KVASIR_PAUSE() _mm_pause()
#else
#define KVASIR_PAUSE() ((void)0)
#endif

namespace kvasir {

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_chunk(int index) {
  // Chunk boundaries rounded to the grain so SIMD tiles never straddle threads.
  const int64_t units = (n_ + grain_ - 1) / grain_;
  const int64_t begin = std::min(n_, units * index / num_threads_ * grain_);
  const int64_t end = std::min(n_, units * (index + 1) / num_threads_ * grain_);
  if (begin < end) (*fn_)(begin, end, index);
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  while (true) {
    // Spin first: kernels come back to back during a forward pass.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
      if (spin > 2000 && spin % 256 == 0) std::this_thread::yield();
      KVASIR_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    run_chunk(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const RangeFn& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  pending_.store(num_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  wake_.notify_all();
  run_chunk(0);
  // Spin briefly, then yield: when cores are oversubscribed a descheduled worker needs the CPU.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 4000) KVASIR_PAUSE();
    else std::this_thread::yield();
  }
  fn_ = nullptr;
}

int ThreadPool::default_threads() {
  // Count distinct (physical id, core id) pairs; SMT siblings share a core's FMA units.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys = "0";
  while (std::getline(cpuinfo, line)) {
    auto value = [&] { auto p = line.find(':'); return p == std::string::npos ? std::string() : line.substr(p + 1); };
    if (line.rfind("physical id", 0) == 0) phys = value();
    if (line.rfind("core id", 0) == 0) cores.insert({phys, value()});
  }
  const int hw = int(std::thread::hardware_concurrency());
  if (!cores.empty()) return int(cores.size());
  return hw > 0 ? hw : 1;
}

}  // namespace kvasir
