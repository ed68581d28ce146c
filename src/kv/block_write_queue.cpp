#include "kv/block_write_queue.h"

namespace kvasir::kv {

BlockWriteQueue::BlockWriteQueue(uint64_t max_pending_bytes, Write write)
    : max_pending_bytes_(max_pending_bytes), write_(std::move(write)), thread_([this] { run(); }) {}

BlockWriteQueue::~BlockWriteQueue() {
  flush();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool BlockWriteQueue::push(StoredBlock block) {
  std::lock_guard lock(mu_);
  if (pending_bytes_ + block.payload.size() > max_pending_bytes_) return false;
  pending_bytes_ += block.payload.size();
  queue_.push_back(std::move(block));
  cv_.notify_one();
  return true;
}

void BlockWriteQueue::flush() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void BlockWriteQueue::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    StoredBlock b = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    write_(b);
    lock.lock();
    busy_ = false;
    pending_bytes_ -= b.payload.size();
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace kvasir::kv
