// A fixed pool of worker threads for data-parallel kernels. parallel_for splits [0, n) into
// grain-aligned chunks that the calling thread and the workers claim from a shared counter
// (a thread that falls behind, e.g. descheduled on a busy machine, simply claims fewer), and
// returns when all chunks are done. Workers spin briefly (yielding now and then) on the job
// word before sleeping on it, so back-to-back kernels cost microseconds. Which thread runs a
// chunk is not deterministic, so kernels must not let results depend on it (ours don't: every
// output is computed the same way wherever it runs).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace kvasir {

class ThreadPool {
 public:
  // fn(begin, end, thread_index) handles items [begin, end); it may be called several times
  // per thread with different ranges. thread_index < num_threads() names the executing thread
  // (for per-thread scratch).
  using RangeFn = std::function<void(int64_t, int64_t, int)>;

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Runs fn over [0, n) in chunks whose boundaries are multiples of `grain` (except the last),
  // at most chunks_per_thread of them per thread. Runs inline when n <= grain or the pool has
  // one thread.
  void parallel_for(int64_t n, int64_t grain, const RangeFn& fn, int chunks_per_thread = 4);

  // Physical cores of this machine (falls back to hardware_concurrency).
  static int default_threads();

 private:
  void worker(int index);
  // Claims and runs chunks of job `gen` until none is left or another job replaced it.
  void run_chunks(uint64_t gen, int index);

  // work_ packs the job generation (high bits) with the next unclaimed unit (low kUnitBits):
  // a claim is a compare-and-swap that succeeds only while its job is current, so a worker
  // that wakes late can never run a finished job's chunks, and the caller never waits for a
  // worker that has claimed nothing.
  // The caller first closes the finished job's word (fresh generation, unit field all ones) and
  // only then rewrites the job fields and publishes the next generation.
  static constexpr int kUnitBits = 32;
  static constexpr uint64_t kUnitMask = (uint64_t(1) << kUnitBits) - 1;

  int num_threads_;
  std::vector<std::thread> threads_;
  // The job, written by the caller before it publishes the generation (atomics: a late worker
  // may read them while the next job is being written; its claim then fails).
  std::atomic<const RangeFn*> fn_{nullptr};
  std::atomic<int64_t> n_{0}, grain_{1}, units_{0}, chunk_units_{1};
  uint64_t gen_ = 0;  // caller-side generation counter (two per job: close, publish)
  // Hot counters on their own cache lines.
  alignas(64) std::atomic<uint64_t> work_{0};
  alignas(64) std::atomic<int64_t> done_{0};  // units finished in the current job
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvasir
