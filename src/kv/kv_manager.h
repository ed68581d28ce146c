// KV manager: per-sequence block tables over a BlockPool, with prefix caching. Integers only.
//
// Life of a sequence:
//   hit = find_prefix(tokens, salt)             longest cached prefix (full blocks, never the last token)
//   seq_admit(id, hit, n, salt)                 references the hit blocks, room for n more tokens
//   seq_allocate(id, num_tokens)                room for the sequence's first num_tokens tokens
//   seq_commit(id, tokens, num_computed)        registers blocks that are full and computed
//   seq_truncate(id, num_tokens)                rollback: frees blocks beyond the first num_tokens
//   seq_free(id)                                drops references; cached blocks stay until evicted
// Allocation that needs space takes the head of the pool's free list; if that block was cached its
// entry (and its descendants') is evicted first — this is the cache's LRU.
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
#include "kv/prefix_cache.h"

namespace kvasir::kv {

using SeqId = int64_t;

struct KvManagerOptions {
  int32_t num_blocks = 0;
  int32_t block_size = 16;
  bool enable_prefix_cache = true;
  std::string model_id = {};  // part of every block hash: caches of different models never mix
  BlockHasher hasher = {};  // empty: hash_block
};

struct PrefixHit {
  std::vector<BlockId> blocks;  // cached blocks covering tokens [0, num_tokens)
  int32_t num_tokens = 0;
};

class KvManager {
 public:
  static Result<KvManager> create(const KvManagerOptions& options);

  // Longest cached prefix of `tokens` under `salt`; references nothing. The hit stops at least one
  // token short of the end (that token's logits are needed). Use it before anything else changes.
  PrefixHit find_prefix(std::span<const int32_t> tokens, std::string_view salt) const;
  // Starts sequence `id`: references `hit`'s blocks and allocates room for `num_new_tokens` after
  // them. Returns false, changing nothing, when the blocks do not fit. `num_prompt_tokens` only
  // feeds the cache counters.
  bool seq_admit(SeqId id, const PrefixHit& hit, int32_t num_new_tokens, std::string_view salt,
                 int32_t num_prompt_tokens);
  // Allocates slots so that the block table covers the first `num_tokens` tokens; false (no change)
  // when not enough blocks are free.
  bool seq_allocate(SeqId id, int32_t num_tokens);
  // Most tokens the sequence could hold now: its table plus every free block.
  int32_t seq_capacity(SeqId id) const;
  // Registers the sequence's blocks that are full within its first `num_computed` tokens (their KV
  // is written). Generated tokens count: turn N+1 of a conversation reuses turn N's answer.
  void seq_commit(SeqId id, std::span<const int32_t> tokens, int32_t num_computed);
  // Rollback (rejected draft tokens): keeps only the blocks covering the first `num_tokens` tokens
  // and frees the rest, last first. Never below what seq_commit registered (those blocks hold
  // verified tokens); asking for less is clamped there.
  void seq_truncate(SeqId id, int32_t num_tokens);
  // Drops the sequence's references, last block first, so its deepest blocks are evicted first.
  void seq_free(SeqId id);
  bool seq_exists(SeqId id) const { return seqs_.count(id) != 0; }
  // Physical block of each logical block. The reference stays valid until seq_free(id).
  const std::vector<BlockId>& seq_blocks(SeqId id) const;

  // Blocks needed to hold `num_tokens` tokens.
  int32_t blocks_for(int32_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  int32_t num_free_blocks() const { return pool_.num_free(); }
  int32_t num_seqs() const { return int32_t(seqs_.size()); }
  const BlockPool& pool() const { return pool_; }
  const PrefixCache& cache() const { return cache_; }
  // Pool and cache invariants, and ref counts equal to the references held by block tables.
  Status check() const;

  // KV tiers (engine/kv_tiering.h). Blocks registered in the prefix cache since the last call
  // (their KV is written and final while they stay cached); recorded only once asked for.
  std::vector<BlockId> take_newly_cached();
  // The chain hash a prompt's first block hangs from under `salt`.
  BlockHash root_hash(std::string_view salt) const { return hash_root(model_id_, salt); }
  // A reference on a block outside any sequence: while a tier fills blocks after a cached prefix,
  // nothing may evict that prefix. Every hold is given back with unhold().
  void hold(BlockId id) { pool_.touch(id); }
  void unhold(BlockId id) { release_block(id); }
  // A block from another tier: takes a block (evicting the least recently used cached one if need
  // be), registers it in the prefix cache as holding `tokens` after `parent` (held, or kNoBlock
  // for a first block) and returns it held; the caller writes its KV, then unholds it. The cached
  // block when one has this content already (held too); kNoBlock when no block is free.
  BlockId adopt_block(BlockHash hash, BlockId parent, std::span<const int32_t> tokens, std::string_view salt);
  // Unregisters a cached block (and its descendants) whose KV could not be written.
  void drop_cached(BlockId id);

 private:
  struct Seq {
    std::vector<BlockId> blocks;
    std::string salt;
    BlockHash root = 0;
    // Blocks [0, num_committed) went through the cache chain; chain_* name the cache entry for
    // the last of them (ours, or an identical block another sequence registered first).
    int32_t num_committed = 0;
    BlockHash chain_hash = 0;
    BlockId chain_node = kNoBlock;
    uint32_t chain_generation = 0;
    bool chain_broken = false;  // an ancestor entry was evicted under us: stop registering
  };

  KvManager(const KvManagerOptions& options);
  BlockId take_block();
  void release_block(BlockId id);

  int32_t block_size_;
  bool enable_prefix_cache_;
  std::string model_id_;
  BlockPool pool_;
  PrefixCache cache_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::vector<BlockId> dropped_;  // scratch for evictions
  bool track_new_ = false;
  std::vector<BlockId> newly_cached_;
};

}  // namespace kvasir::kv
