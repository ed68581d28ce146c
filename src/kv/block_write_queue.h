// Blocks waiting to be written and the thread that writes them: what every KV store shares. A
// push beyond the pending-bytes bound is refused (the store counts it dropped); the destructor
// writes what is queued, then stops.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "kv/block_store.h"

namespace kvasir::kv {

class BlockWriteQueue {
 public:
  using Write = std::function<void(const StoredBlock&)>;
  BlockWriteQueue(uint64_t max_pending_bytes, Write write);
  ~BlockWriteQueue();
  BlockWriteQueue(const BlockWriteQueue&) = delete;
  BlockWriteQueue& operator=(const BlockWriteQueue&) = delete;

  bool push(StoredBlock block);  // false: the queue is full, nothing queued
  void flush();                  // returns once every queued block is written

 private:
  void run();

  uint64_t max_pending_bytes_;
  Write write_;
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<StoredBlock> queue_;
  uint64_t pending_bytes_ = 0;
  bool busy_ = false, stop_ = false;
  std::thread thread_;  // last: started once the rest is ready
};

}  // namespace kvasir::kv
