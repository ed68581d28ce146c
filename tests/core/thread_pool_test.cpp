#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/thread_pool.h"

using kvasir::ThreadPool;

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 16, 100, 1001}) {
      for (int64_t grain : {1, 4, 16}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, grain, [&](int64_t b, int64_t e, int t) {
          EXPECT_LT(t, threads);
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        for (auto& h : hits) EXPECT_EQ(h.load(), 1) << "threads " << threads << " n " << n << " grain " << grain;
      }
    }
  }
}

TEST(ThreadPool, ChunksRespectTheGrain) {
  ThreadPool pool(3);
  pool.parallel_for(100, 16, [&](int64_t b, int64_t e, int) {
    EXPECT_EQ(b % 16, 0);
    if (e != 100) EXPECT_EQ(e % 16, 0);
  });
}

TEST(ThreadPool, ManyBackToBackCalls) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 20000; ++i)
    pool.parallel_for(4, 1, [&](int64_t b, int64_t e, int) { sum += e - b; });
  EXPECT_EQ(sum.load(), 80000);
}

TEST(ThreadPool, DefaultThreadsIsPositive) { EXPECT_GE(ThreadPool::default_threads(), 1); }

// Back-to-back jobs of different sizes and grains with more threads than cores, so workers wake
// late, mid-way through or after a job: each job must see exactly its own ranges, once.
TEST(ThreadPool, LateWorkersNeverRunStaleJobs) {
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    for (int job = 0; job < 3000; ++job) {
      const int64_t n = 1 + (job * 37) % 257, grain = 1 + job % 7;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e, int t) {
        ASSERT_LT(t, threads);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      }, 1 + job % 5);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "job " << job << " i " << i;
    }
  }
}
