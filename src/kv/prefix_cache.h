// Prefix cache: full KV blocks indexed by chained hash, with the content kept for verification.
//
// Two views of the same entries:
//  - a hash map, chained hash -> block ids (a multimap, so colliding entries coexist);
//  - a tree, each cached block linked to the cached block before it (its parent; kNoBlock for the
//    first block of a prompt). A lookup walks the prompt block by block; an entry matches only when
//    its parent is the block matched one step earlier, its tokens are equal and (for a first
//    block) its salt is equal. By induction a hit means the whole prefix is identical, so even a
//    forced hash collision cannot alias KV.
// Evicting a block also drops its cached descendants: they can no longer be reached from the root,
// and their parent id may soon name different content.
//
// The cache does not own blocks or reference counts (BlockPool does); it only knows which block
// ids hold which content. KvManager ties the two together.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace kvasir::kv {

struct PrefixCacheOptions {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  BlockHasher hasher = {};  // empty: hash_block
};

struct PrefixCacheCounters {
  int64_t num_queries = 0;        // prompts looked up (at admission)
  int64_t num_query_tokens = 0;   // their tokens
  int64_t num_hits = 0;           // queries that matched at least one block
  int64_t num_hit_tokens = 0;     // tokens served from the cache
  int64_t num_inserts = 0;        // blocks registered
  int64_t num_evictions = 0;      // blocks dropped (descendants included)
};

class PrefixCache {
 public:
  explicit PrefixCache(const PrefixCacheOptions& options);

  BlockHash hash(BlockHash parent, std::span<const int32_t> tokens) const { return hasher_(parent, tokens); }

  // Longest run of cached blocks matching `tokens` from the start, at most `max_blocks` blocks;
  // appends their ids to `blocks` and returns how many matched. `root` is hash_root(model, salt).
  int32_t match(BlockHash root, std::string_view salt, std::span<const int32_t> tokens, int32_t max_blocks,
                std::vector<BlockId>* blocks) const;
  // The cached block with exactly this content after `parent` (kNoBlock: first block), or kNoBlock.
  BlockId find(BlockHash hash, BlockId parent, std::span<const int32_t> tokens, std::string_view salt) const;
  // Registers `block` (not cached yet) as holding `tokens` after `parent`.
  void insert(BlockId block, BlockHash hash, BlockId parent, std::span<const int32_t> tokens,
              std::string_view salt);
  // Drops `block` and its cached descendants; appends every dropped id (block first) to `dropped`.
  void evict(BlockId block, std::vector<BlockId>* dropped);
  void record_query(int32_t num_tokens, int32_t num_hit_tokens);

  bool is_cached(BlockId id) const { return nodes_[size_t(id)].cached; }
  BlockHash block_hash(BlockId id) const { return nodes_[size_t(id)].hash; }
  BlockId parent(BlockId id) const { return nodes_[size_t(id)].parent; }
  // A first block's salt (empty for the others).
  const std::string& salt(BlockId id) const { return nodes_[size_t(id)].salt; }
  // Changes whenever the block is inserted or evicted: lets a holder of a block id notice that
  // the id now names different content.
  uint32_t generation(BlockId id) const { return nodes_[size_t(id)].generation; }
  std::span<const int32_t> block_tokens(BlockId id) const {
    return {tokens_.data() + size_t(id) * size_t(block_size_), size_t(block_size_)};
  }
  int32_t block_size() const { return block_size_; }
  int32_t num_cached() const { return int32_t(by_hash_.size()); }
  const PrefixCacheCounters& counters() const { return counters_; }
  // Internal invariants: map and tree agree, links are consistent.
  Status check() const;

 private:
  struct Node {
    BlockHash hash = 0;
    BlockId parent = kNoBlock;
    BlockId first_child = kNoBlock, prev_sibling = kNoBlock, next_sibling = kNoBlock;
    uint32_t generation = 0;
    bool cached = false;
    std::string salt;  // first blocks only (parent == kNoBlock)
  };
  bool same_content(BlockId id, BlockId parent, std::span<const int32_t> tokens, std::string_view salt) const;
  void drop_one(BlockId id);

  int32_t block_size_;
  BlockHasher hasher_;
  std::vector<Node> nodes_;       // [num_blocks]
  std::vector<int32_t> tokens_;   // [num_blocks, block_size] content of cached blocks
  std::unordered_multimap<BlockHash, BlockId> by_hash_;
  PrefixCacheCounters counters_;
};

}  // namespace kvasir::kv
