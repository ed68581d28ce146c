// Block pool: a fixed set of KV block ids with reference counts and a free list kept in eviction
// order (like vLLM v1's FreeKVCacheBlockQueue). Integers only; the memory lives in model/KvCache.
//
// The free list holds every block with ref count 0. Allocation takes the head. A freed block goes
// to the tail (it may hold cached KV worth keeping: least recently freed is evicted first) or,
// when it holds nothing reusable, to the head (so it is reused before any cached block).
// touch() takes a reference on a block, pulling it off the free list when it was free (a prefix
// cache hit on a freed-but-cached block).
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace kvasir::kv {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

enum class FreePlace { Head, Tail };

struct BlockPoolCounters {
  int64_t num_allocated = 0;  // block_alloc calls that returned a block
  int64_t num_freed = 0;      // ref count reached 0
  int64_t num_reclaimed = 0;  // touch() on a free block
};

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  // Head of the free list with ref count 1, or kNoBlock when every block is referenced.
  BlockId block_alloc();
  // Drops one reference; at 0 the block joins the free list at `place`.
  void block_free(BlockId id, FreePlace place = FreePlace::Tail);
  // Takes one reference; a free block leaves the free list.
  void touch(BlockId id);
  // Moves a block that is on the free list to its head (its cached content was dropped).
  void move_to_head(BlockId id);

  int32_t ref_count(BlockId id) const { return ref_[size_t(id)]; }
  bool is_free(BlockId id) const { return ref_[size_t(id)] == 0; }
  int32_t num_blocks() const { return int32_t(ref_.size()); }
  int32_t num_free() const { return num_free_; }
  // Free list from head to tail (eviction order); for tests and debugging.
  std::vector<BlockId> free_list() const;
  const BlockPoolCounters& counters() const { return counters_; }
  // Internal invariants: list links, counts, ref counts; an error names the first violation.
  Status check() const;

 private:
  void unlink(BlockId id);
  void push_head(BlockId id);
  void push_tail(BlockId id);

  std::vector<int32_t> ref_;    // [num_blocks]
  std::vector<BlockId> prev_;   // [num_blocks] free-list links, kNoBlock at the ends
  std::vector<BlockId> next_;   // [num_blocks]
  BlockId head_ = kNoBlock, tail_ = kNoBlock;
  int32_t num_free_ = 0;
  BlockPoolCounters counters_;
};

}  // namespace kvasir::kv
