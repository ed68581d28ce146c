#include "kv/kv_manager.h"

#include <algorithm>
#include <cassert>

namespace kvasir::kv {

Result<KvManager> KvManager::create(const KvManagerOptions& options) {
  if (options.num_blocks <= 0) return Error{"kv: num_blocks must be positive, got " + std::to_string(options.num_blocks)};
  if (options.block_size <= 0) return Error{"kv: block_size must be positive, got " + std::to_string(options.block_size)};
  return KvManager(options);
}

KvManager::KvManager(const KvManagerOptions& options)
    : block_size_(options.block_size),
      enable_prefix_cache_(options.enable_prefix_cache),
      model_id_(options.model_id),
      pool_(options.num_blocks),
      cache_({.num_blocks = options.enable_prefix_cache ? options.num_blocks : 0,
              .block_size = options.block_size,
              .hasher = options.hasher}) {}

PrefixHit KvManager::find_prefix(std::span<const int32_t> tokens, std::string_view salt) const {
  PrefixHit hit;
  if (!enable_prefix_cache_ || tokens.size() <= size_t(block_size_)) return hit;
  // Never the last token: its logits are needed, so it must be computed.
  const int32_t max_blocks = int32_t((tokens.size() - 1) / size_t(block_size_));
  int32_t n = cache_.match(hash_root(model_id_, salt), salt, tokens, max_blocks, &hit.blocks);
  hit.num_tokens = n * block_size_;
  return hit;
}

bool KvManager::seq_admit(SeqId id, const PrefixHit& hit, int32_t num_new_tokens, std::string_view salt,
                          int32_t num_prompt_tokens) {
  assert(!seq_exists(id));
  const int32_t num_hit = int32_t(hit.blocks.size());
  const int32_t num_new = blocks_for(hit.num_tokens + num_new_tokens) - num_hit;
  // A hit on a free (cached, unreferenced) block takes it off the free list too.
  int32_t num_free_hits = 0;
  for (BlockId b : hit.blocks) num_free_hits += pool_.is_free(b) ? 1 : 0;
  if (num_new + num_free_hits > pool_.num_free()) return false;

  Seq& s = seqs_[id];
  s.salt.assign(salt);
  s.root = hash_root(model_id_, salt);
  s.chain_hash = s.root;
  s.blocks.reserve(size_t(num_hit + num_new));
  // Reference the hits before allocating, so allocation cannot evict them.
  for (BlockId b : hit.blocks) {
    pool_.touch(b);
    s.blocks.push_back(b);
  }
  for (int32_t i = 0; i < num_new; ++i) s.blocks.push_back(take_block());
  if (num_hit > 0) {
    BlockId last = hit.blocks.back();
    s.num_committed = num_hit;
    s.chain_node = last;
    s.chain_hash = cache_.block_hash(last);
    s.chain_generation = cache_.generation(last);
  }
  if (enable_prefix_cache_) cache_.record_query(num_prompt_tokens, hit.num_tokens);
  return true;
}

bool KvManager::seq_allocate(SeqId id, int32_t num_tokens) {
  Seq& s = seqs_.at(id);
  const int32_t need = blocks_for(num_tokens) - int32_t(s.blocks.size());
  if (need <= 0) return true;
  if (need > pool_.num_free()) return false;
  for (int32_t i = 0; i < need; ++i) s.blocks.push_back(take_block());
  return true;
}

int32_t KvManager::seq_capacity(SeqId id) const {
  return (int32_t(seqs_.at(id).blocks.size()) + pool_.num_free()) * block_size_;
}

void KvManager::seq_commit(SeqId id, std::span<const int32_t> tokens, int32_t num_computed) {
  if (!enable_prefix_cache_) return;
  Seq& s = seqs_.at(id);
  const size_t bs = size_t(block_size_);
  const int32_t num_full = std::min<int32_t>(num_computed / block_size_, int32_t(s.blocks.size()));
  while (!s.chain_broken && s.num_committed < num_full) {
    const BlockId parent = s.chain_node;
    if (parent != kNoBlock && (!cache_.is_cached(parent) || cache_.generation(parent) != s.chain_generation)) {
      s.chain_broken = true;  // the entry we chain from was evicted; its id may name other content now
      break;
    }
    auto block_tokens = tokens.subspan(size_t(s.num_committed) * bs, bs);
    const BlockHash h = cache_.hash(s.chain_hash, block_tokens);
    BlockId node = cache_.find(h, parent, block_tokens, s.salt);
    if (node == kNoBlock) {
      // New content: our block becomes the entry. (When another sequence registered the same content
      // first, ours stays private and the chain continues through theirs.)
      node = s.blocks[size_t(s.num_committed)];
      assert(!cache_.is_cached(node));
      cache_.insert(node, h, parent, block_tokens, s.salt);
      if (track_new_) newly_cached_.push_back(node);
    }
    s.chain_node = node;
    s.chain_hash = h;
    s.chain_generation = cache_.generation(node);
    ++s.num_committed;
  }
}

void KvManager::seq_truncate(SeqId id, int32_t num_tokens) {
  Seq& s = seqs_.at(id);
  const size_t keep = size_t(std::max(blocks_for(std::max(num_tokens, 0)), s.num_committed));
  while (s.blocks.size() > keep) {
    release_block(s.blocks.back());
    s.blocks.pop_back();
  }
}

void KvManager::seq_free(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  const auto& blocks = it->second.blocks;
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) release_block(*b);
  seqs_.erase(it);
}

const std::vector<BlockId>& KvManager::seq_blocks(SeqId id) const { return seqs_.at(id).blocks; }

BlockId KvManager::take_block() {
  BlockId id = pool_.block_alloc();
  assert(id != kNoBlock);
  if (enable_prefix_cache_ && cache_.is_cached(id)) {
    dropped_.clear();
    cache_.evict(id, &dropped_);
    // Descendants lost their content too: reuse them before blocks that still hold cached KV.
    for (size_t i = 1; i < dropped_.size(); ++i) {
      if (pool_.is_free(dropped_[i])) pool_.move_to_head(dropped_[i]);
    }
  }
  return id;
}

void KvManager::release_block(BlockId id) {
  // Cached blocks join the tail (least recently freed is evicted first); blocks holding nothing
  // reusable join the head, so they are reused before any cached block.
  const bool cached = enable_prefix_cache_ && cache_.is_cached(id);
  pool_.block_free(id, cached ? FreePlace::Tail : FreePlace::Head);
}

std::vector<BlockId> KvManager::take_newly_cached() {
  track_new_ = true;
  std::vector<BlockId> out;
  out.swap(newly_cached_);
  return out;
}

BlockId KvManager::adopt_block(BlockHash hash, BlockId parent, std::span<const int32_t> tokens, std::string_view salt) {
  if (!enable_prefix_cache_ || int32_t(tokens.size()) != block_size_) return kNoBlock;
  if (BlockId have = cache_.find(hash, parent, tokens, salt); have != kNoBlock) {
    pool_.touch(have);
    return have;
  }
  if (pool_.num_free() == 0) return kNoBlock;
  const BlockId id = take_block();
  cache_.insert(id, hash, parent, tokens, salt);
  return id;
}

void KvManager::drop_cached(BlockId id) {
  if (!enable_prefix_cache_ || !cache_.is_cached(id)) return;
  dropped_.clear();
  cache_.evict(id, &dropped_);
  for (BlockId b : dropped_)
    if (pool_.is_free(b)) pool_.move_to_head(b);
}

Status KvManager::check() const {
  if (auto st = pool_.check(); !st) return Error{"block pool: " + st.error()};
  if (enable_prefix_cache_) {
    if (auto st = cache_.check(); !st) return Error{"prefix cache: " + st.error()};
  }
  std::vector<int32_t> refs(size_t(pool_.num_blocks()), 0);
  for (const auto& [id, s] : seqs_) {
    std::vector<BlockId> sorted = s.blocks;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return Error{"sequence " + std::to_string(id) + " holds a block twice"};
    }
    for (BlockId b : s.blocks) ++refs[size_t(b)];
  }
  for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
    if (refs[size_t(b)] != pool_.ref_count(b)) {
      return Error{"block " + std::to_string(b) + " has ref count " + std::to_string(pool_.ref_count(b)) +
                   " but " + std::to_string(refs[size_t(b)]) + " block tables hold it"};
    }
  }
  return {};
}

}  // namespace kvasir::kv
