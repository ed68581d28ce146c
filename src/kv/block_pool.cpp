#include "kv/block_pool.h"

#include <cassert>
#include <string>

namespace kvasir::kv {

BlockPool::BlockPool(int32_t num_blocks)
    : ref_(size_t(num_blocks), 0), prev_(size_t(num_blocks), kNoBlock), next_(size_t(num_blocks), kNoBlock) {
  // Initial order 0, 1, 2, ...: the first allocations get the lowest ids.
  for (BlockId id = 0; id < num_blocks; ++id) push_tail(id);
}

BlockId BlockPool::block_alloc() {
  BlockId id = head_;
  if (id == kNoBlock) return kNoBlock;
  unlink(id);
  ref_[size_t(id)] = 1;
  ++counters_.num_allocated;
  return id;
}

void BlockPool::block_free(BlockId id, FreePlace place) {
  assert(ref_[size_t(id)] > 0);
  if (--ref_[size_t(id)] > 0) return;
  ++counters_.num_freed;
  if (place == FreePlace::Head) {
    push_head(id);
  } else {
    push_tail(id);
  }
}

void BlockPool::touch(BlockId id) {
  if (ref_[size_t(id)] == 0) {
    unlink(id);
    ++counters_.num_reclaimed;
  }
  ++ref_[size_t(id)];
}

void BlockPool::move_to_head(BlockId id) {
  assert(ref_[size_t(id)] == 0);
  unlink(id);
  push_head(id);
}

std::vector<BlockId> BlockPool::free_list() const {
  std::vector<BlockId> out;
  out.reserve(size_t(num_free_));
  for (BlockId id = head_; id != kNoBlock; id = next_[size_t(id)]) out.push_back(id);
  return out;
}

void BlockPool::unlink(BlockId id) {
  BlockId p = prev_[size_t(id)], n = next_[size_t(id)];
  (p == kNoBlock ? head_ : next_[size_t(p)]) = n;
  (n == kNoBlock ? tail_ : prev_[size_t(n)]) = p;
  prev_[size_t(id)] = next_[size_t(id)] = kNoBlock;
  --num_free_;
}

void BlockPool::push_head(BlockId id) {
  prev_[size_t(id)] = kNoBlock;
  next_[size_t(id)] = head_;
  (head_ == kNoBlock ? tail_ : prev_[size_t(head_)]) = id;
  head_ = id;
  ++num_free_;
}

void BlockPool::push_tail(BlockId id) {
  next_[size_t(id)] = kNoBlock;
  prev_[size_t(id)] = tail_;
  (tail_ == kNoBlock ? head_ : next_[size_t(tail_)]) = id;
  tail_ = id;
  ++num_free_;
}

Status BlockPool::check() const {
  const int32_t n = num_blocks();
  std::vector<uint8_t> on_list(size_t(n), 0);
  int32_t count = 0;
  BlockId prev = kNoBlock;
  for (BlockId id = head_; id != kNoBlock; id = next_[size_t(id)]) {
    if (id < 0 || id >= n) return Error{"free list holds out-of-range block " + std::to_string(id)};
    if (on_list[size_t(id)]) return Error{"free list cycles at block " + std::to_string(id)};
    if (prev_[size_t(id)] != prev) return Error{"broken prev link at block " + std::to_string(id)};
    if (ref_[size_t(id)] != 0) return Error{"block " + std::to_string(id) + " on the free list has refs"};
    on_list[size_t(id)] = 1;
    prev = id;
    ++count;
  }
  if (prev != tail_) return Error{"tail does not end the free list"};
  if (count != num_free_) return Error{"num_free " + std::to_string(num_free_) + " but list holds " +
                                       std::to_string(count)};
  for (BlockId id = 0; id < n; ++id) {
    if (ref_[size_t(id)] < 0) return Error{"negative ref count on block " + std::to_string(id)};
    if (ref_[size_t(id)] == 0 && !on_list[size_t(id)]) {
      return Error{"block " + std::to_string(id) + " has no refs but is not on the free list"};
    }
  }
  return {};
}

}  // namespace kvasir::kv
