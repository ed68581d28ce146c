// A fixed pool of worker threads for data-parallel kernels. parallel_for splits [0, n) into
// contiguous chunks, one per thread, and returns when all are done. Workers spin briefly on an
// atomic generation counter before sleeping, so back-to-back kernels cost microseconds.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvasir {

class ThreadPool {
 public:
  // fn(begin, end, thread_index) handles items [begin, end).
  using RangeFn = std::function<void(int64_t, int64_t, int)>;

  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Runs fn over [0, n) split into num_threads contiguous chunks whose boundaries are multiples
  // of `grain` (except the last). Runs inline when n is small or the pool has one thread.
  void parallel_for(int64_t n, int64_t grain, const RangeFn& fn);

  // Physical cores of this machine (falls back to hardware_concurrency).
  static int default_threads();

 private:
  void worker(int index);
  void run_chunk(int index);

  int num_threads_;
  std::vector<std::thread> threads_;
  const RangeFn* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
};

}  // namespace kvasir
