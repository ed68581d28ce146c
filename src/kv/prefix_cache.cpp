#include "kv/prefix_cache.h"

#include <algorithm>
#include <cassert>

namespace kvasir::kv {

PrefixCache::PrefixCache(const PrefixCacheOptions& options)
    : block_size_(options.block_size),
      hasher_(options.hasher ? options.hasher : BlockHasher(hash_block)),
      nodes_(size_t(options.num_blocks)),
      tokens_(size_t(options.num_blocks) * size_t(options.block_size), 0) {
  by_hash_.reserve(size_t(options.num_blocks));
}

bool PrefixCache::same_content(BlockId id, BlockId parent, std::span<const int32_t> tokens,
                               std::string_view salt) const {
  const Node& n = nodes_[size_t(id)];
  if (!n.cached || n.parent != parent) return false;
  if (parent == kNoBlock && n.salt != salt) return false;
  auto stored = block_tokens(id);
  return std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end());
}

BlockId PrefixCache::find(BlockHash hash, BlockId parent, std::span<const int32_t> tokens,
                          std::string_view salt) const {
  auto [lo, hi] = by_hash_.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    if (same_content(it->second, parent, tokens, salt)) return it->second;
  }
  return kNoBlock;
}

int32_t PrefixCache::match(BlockHash root, std::string_view salt, std::span<const int32_t> tokens,
                           int32_t max_blocks, std::vector<BlockId>* blocks) const {
  const size_t bs = size_t(block_size_);
  const int32_t limit = std::min<int32_t>(max_blocks, int32_t(tokens.size() / bs));
  BlockHash h = root;
  BlockId parent = kNoBlock;
  int32_t n = 0;
  for (; n < limit; ++n) {
    auto block = tokens.subspan(size_t(n) * bs, bs);
    h = hasher_(h, block);
    BlockId id = find(h, parent, block, salt);
    if (id == kNoBlock) break;
    blocks->push_back(id);
    parent = id;
  }
  return n;
}

void PrefixCache::insert(BlockId block, BlockHash hash, BlockId parent, std::span<const int32_t> tokens,
                         std::string_view salt) {
  assert(tokens.size() == size_t(block_size_));
  Node& n = nodes_[size_t(block)];
  assert(!n.cached);
  n.hash = hash;
  n.parent = parent;
  n.cached = true;
  ++n.generation;
  n.first_child = n.prev_sibling = n.next_sibling = kNoBlock;
  if (parent == kNoBlock) {
    n.salt.assign(salt);
  } else {
    n.salt.clear();
    Node& p = nodes_[size_t(parent)];
    n.next_sibling = p.first_child;
    if (p.first_child != kNoBlock) nodes_[size_t(p.first_child)].prev_sibling = block;
    p.first_child = block;
  }
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + ptrdiff_t(size_t(block) * size_t(block_size_)));
  by_hash_.emplace(hash, block);
  ++counters_.num_inserts;
}

void PrefixCache::drop_one(BlockId id) {
  Node& n = nodes_[size_t(id)];
  auto [lo, hi] = by_hash_.equal_range(n.hash);
  for (auto it = lo; it != hi; ++it) {
    if (it->second == id) {
      by_hash_.erase(it);
      break;
    }
  }
  // Unlink from a surviving parent; inside a dropped subtree the parent went first.
  if (n.parent != kNoBlock && nodes_[size_t(n.parent)].cached) {
    Node& p = nodes_[size_t(n.parent)];
    if (n.prev_sibling != kNoBlock) {
      nodes_[size_t(n.prev_sibling)].next_sibling = n.next_sibling;
    } else if (p.first_child == id) {
      p.first_child = n.next_sibling;
    }
    if (n.next_sibling != kNoBlock) nodes_[size_t(n.next_sibling)].prev_sibling = n.prev_sibling;
  }
  n.cached = false;
  n.parent = n.prev_sibling = n.next_sibling = kNoBlock;
  ++n.generation;
  n.salt.clear();
  ++counters_.num_evictions;
}

void PrefixCache::evict(BlockId block, std::vector<BlockId>* dropped) {
  // Depth-first over the subtree, using `dropped` itself as the work list.
  const size_t first = dropped->size();
  dropped->push_back(block);
  for (size_t i = first; i < dropped->size(); ++i) {
    BlockId id = (*dropped)[i];
    for (BlockId c = nodes_[size_t(id)].first_child; c != kNoBlock; c = nodes_[size_t(c)].next_sibling) {
      dropped->push_back(c);
    }
    nodes_[size_t(id)].first_child = kNoBlock;
  }
  for (size_t i = first; i < dropped->size(); ++i) drop_one((*dropped)[i]);
}

void PrefixCache::record_query(int32_t num_tokens, int32_t num_hit_tokens) {
  ++counters_.num_queries;
  counters_.num_query_tokens += num_tokens;
  if (num_hit_tokens > 0) ++counters_.num_hits;
  counters_.num_hit_tokens += num_hit_tokens;
}

Status PrefixCache::check() const {
  int32_t num_cached = 0;
  for (BlockId id = 0; id < BlockId(nodes_.size()); ++id) {
    const Node& n = nodes_[size_t(id)];
    const std::string at = " at block " + std::to_string(id);
    if (!n.cached) {
      if (n.first_child != kNoBlock) return Error{"uncached block has children" + at};
      continue;
    }
    ++num_cached;
    bool in_map = false;
    auto [lo, hi] = by_hash_.equal_range(n.hash);
    for (auto it = lo; it != hi; ++it) in_map |= it->second == id;
    if (!in_map) return Error{"cached block missing from the hash map" + at};
    if (n.parent != kNoBlock) {
      const Node& p = nodes_[size_t(n.parent)];
      if (!p.cached) return Error{"cached block under an uncached parent" + at};
      bool linked = false;
      for (BlockId c = p.first_child; c != kNoBlock; c = nodes_[size_t(c)].next_sibling) linked |= c == id;
      if (!linked) return Error{"cached block missing from its parent's children" + at};
    }
    for (BlockId c = n.first_child; c != kNoBlock; c = nodes_[size_t(c)].next_sibling) {
      if (nodes_[size_t(c)].parent != id) return Error{"child with a different parent" + at};
    }
  }
  if (num_cached != int32_t(by_hash_.size())) return Error{"hash map and tree disagree on the count"};
  return {};
}

}  // namespace kvasir::kv
