#include "core/thread_pool.h"

#include <algorithm>
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
namespace {

// Spin-wait budget of a worker before it sleeps (~0.3-1 ms), and how often a spinner yields
// its core: on a machine busier than our thread count, a pure spinner would burn the time
// slice the thread it waits for needs.
constexpr int kSpinIterations = 1 << 15;
constexpr int kYieldEvery = 1 << 8;

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  work_.fetch_add(uint64_t(1) << kUnitBits);
  work_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_chunks(uint64_t gen, int index) {
  const RangeFn* fn = fn_.load(std::memory_order_relaxed);
  const int64_t n = n_.load(std::memory_order_relaxed), grain = grain_.load(std::memory_order_relaxed);
  const int64_t units = units_.load(std::memory_order_relaxed), chunk = chunk_units_.load(std::memory_order_relaxed);
  // Pairs with the caller's release fence: if any field above is already the next job's, the
  // load below sees that job's closed word (or later) and the claim fails.
  std::atomic_thread_fence(std::memory_order_acquire);
  uint64_t w = work_.load(std::memory_order_acquire);
  for (;;) {
    if ((w >> kUnitBits) != gen) return;  // a newer job: the values read above may be stale
    const int64_t u = int64_t(w & kUnitMask);
    if (u >= units) return;
    // Success proves job `gen` was still running, so fn..chunk above are its own.
    if (!work_.compare_exchange_weak(w, w + uint64_t(chunk), std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    const int64_t end_unit = std::min(units, u + chunk);
    (*fn)(u * grain, std::min(n, end_unit * grain), index);
    done_.fetch_add(end_unit - u, std::memory_order_release);
    w = work_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;  // generation last worked on
  for (;;) {
    // Spin first: kernels come back to back during a forward pass.
    uint64_t w = work_.load(std::memory_order_acquire);
    for (int spin = 0; (w >> kUnitBits) == seen && spin < kSpinIterations; ++spin) {
      if ((spin + 1) % kYieldEvery == 0) std::this_thread::yield();
      KVASIR_PAUSE();
      w = work_.load(std::memory_order_acquire);
    }
    while ((w >> kUnitBits) == seen) {
      // Announce the sleep before re-checking (seq_cst on both sides: the caller either sees
      // the sleeper and notifies, or we see its new job and do not block).
      sleepers_.fetch_add(1);
      work_.wait(w);
      sleepers_.fetch_sub(1);
      w = work_.load(std::memory_order_acquire);
    }
    seen = w >> kUnitBits;
    if (stop_.load()) return;
    run_chunks(seen, index);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const RangeFn& fn, int chunks_per_thread) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  const int64_t units = (n + grain - 1) / grain;
  const int64_t chunks = int64_t(num_threads_) * std::max(1, chunks_per_thread);
  // Close the word to claims under a fresh generation before rewriting the job fields: a late
  // worker that reads new fields then fails its claim instead of running a bogus chunk.
  work_.store((++gen_ << kUnitBits) | kUnitMask, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  fn_.store(&fn, std::memory_order_relaxed);
  n_.store(n, std::memory_order_relaxed);
  grain_.store(grain, std::memory_order_relaxed);
  units_.store(units, std::memory_order_relaxed);
  chunk_units_.store(std::max<int64_t>(1, (units + chunks - 1) / chunks), std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const uint64_t word = ++gen_ << kUnitBits;
  work_.store(word);  // seq_cst: publishes the job, ordered before the sleepers_ load
  if (sleepers_.load() > 0) work_.notify_all();
  run_chunks(word >> kUnitBits, 0);
  for (int spin = 1; done_.load(std::memory_order_acquire) != units; ++spin) {
    if (spin % kYieldEvery == 0) std::this_thread::yield();
    KVASIR_PAUSE();
  }
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
