#include "engine/kv_tiering.h"

#include <algorithm>
#include <chrono>

namespace kvasir::engine {

KvTiering::KvTiering(std::vector<std::shared_ptr<kv::BlockStore>> stores, runtime::ModelRunner& runner)
    : stores_(std::move(stores)), runner_(runner), block_tokens_(size_t(runner.info().block_size)) {
  for (int64_t l = 0; l < runner.info().n_layers; ++l) {
    layer_bytes_.push_back(runner.kv_block_bytes(l));
    block_bytes_ += layer_bytes_.back();
  }
  counters_.loaded_blocks.assign(stores_.size(), 0);
}

void KvTiering::save_new(kv::KvManager& kv) {
  const kv::PrefixCache& cache = kv.cache();
  for (kv::BlockId b : kv.take_newly_cached()) {
    if (!cache.is_cached(b)) continue;
    const kv::BlockHash hash = cache.block_hash(b);
    const kv::BlockId parent = cache.parent(b);
    kv::StoredBlock d{.hash = hash,
                      .parent = parent == kv::kNoBlock ? kv.root_hash(cache.salt(b)) : cache.block_hash(parent),
                      .salt = parent == kv::kNoBlock ? cache.salt(b) : std::string(),
                      .tokens = {cache.block_tokens(b).begin(), cache.block_tokens(b).end()},
                      .payload = std::vector<uint8_t>(block_bytes_)};
    size_t at = 0;
    bool ok = true;
    const int32_t one[] = {b};
    for (size_t l = 0; l < layer_bytes_.size() && ok; ++l) {
      ok = bool(runner_.export_kv(int64_t(l), one, d.payload.data() + at));
      at += layer_bytes_[l];
    }
    if (!ok) continue;
    for (size_t s = 0; s < stores_.size(); ++s) stores_[s]->write_async(s + 1 == stores_.size() ? std::move(d) : d);
    ++counters_.saved_blocks;
  }
}

std::optional<kv::StoredBlock> KvTiering::find(kv::BlockHash hash, kv::BlockHash parent_hash,
                                               std::span<const int32_t> tokens, bool first, const std::string& salt,
                                               size_t* store) const {
  for (size_t s = 0; s < stores_.size(); ++s) {
    if (!stores_[s]->contains(hash)) continue;
    auto d = stores_[s]->read(hash);
    if (!d || d->parent != parent_hash || d->payload.size() != block_bytes_ ||
        !std::equal(tokens.begin(), tokens.end(), d->tokens.begin(), d->tokens.end()) || (first && d->salt != salt))
      continue;
    for (size_t earlier = 0; earlier < s; ++earlier) stores_[earlier]->write_async(*d);
    *store = s;
    return d;
  }
  return std::nullopt;
}

KvTiering::Plan KvTiering::plan(const kv::KvManager& kv, std::span<const int32_t> prompt, const std::string& salt) const {
  Plan p;
  const size_t bs = size_t(kv.block_size());
  if (prompt.size() <= bs) return p;
  const size_t max_blocks = (prompt.size() - 1) / bs;  // never the last token (its logits are needed)
  const kv::PrefixHit hit = kv.find_prefix(prompt, salt);
  p.first = hit.blocks.size();
  if (p.first >= max_blocks) return p;
  const kv::PrefixCache& cache = kv.cache();
  kv::BlockHash parent = p.first ? cache.block_hash(hit.blocks.back()) : kv.root_hash(salt);
  const kv::BlockHash next = cache.hash(parent, prompt.subspan(p.first * bs, bs));
  if (std::none_of(stores_.begin(), stores_.end(), [&](const auto& s) { return s->contains(next); })) return p;
  for (size_t i = p.first; i < max_blocks; ++i) {
    const kv::BlockHash h = cache.hash(parent, prompt.subspan(i * bs, bs));
    p.hashes.push_back(h);
    p.parents.push_back(parent);
    parent = h;
  }
  return p;
}

KvTiering::Read KvTiering::read(const Plan& plan, std::span<const int32_t> prompt, const std::string& salt) {
  Read r;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t k = 0; k < plan.hashes.size(); ++k) {
    const size_t i = plan.first + k;
    if ((i + 1) * block_tokens_ > prompt.size()) break;
    size_t store = 0;
    auto d = find(plan.hashes[k], plan.parents[k], prompt.subspan(i * block_tokens_, block_tokens_), i == 0, salt, &store);
    if (!d) break;
    r.blocks.push_back(std::move(*d));
    r.store.push_back(store);
  }
  r.ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

int32_t KvTiering::import(kv::KvManager& kv, std::span<const int32_t> prompt, const std::string& salt, Read r) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t bs = size_t(kv.block_size());
  const kv::PrefixHit hit = kv.find_prefix(prompt, salt);
  const kv::PrefixCache& cache = kv.cache();
  // Memory may have moved since the plan: continue from the current hit with the blocks that follow it.
  kv::BlockHash parent_hash = hit.blocks.empty() ? kv.root_hash(salt) : cache.block_hash(hit.blocks.back());
  size_t k = 0;
  while (k < r.blocks.size() && r.blocks[k].parent != parent_hash) ++k;
  std::vector<kv::BlockId> held(hit.blocks.begin(), hit.blocks.end());
  for (kv::BlockId b : held) kv.hold(b);
  kv::BlockId parent = hit.blocks.empty() ? kv::kNoBlock : hit.blocks.back();
  int32_t loaded = 0;
  for (size_t i = hit.blocks.size(); k < r.blocks.size(); ++k, ++i) {
    const kv::StoredBlock& d = r.blocks[k];
    const auto tokens = prompt.subspan(i * bs, bs);
    if (i * bs + bs >= prompt.size() || d.parent != parent_hash || cache.hash(parent_hash, tokens) != d.hash) break;
    const kv::BlockId id = kv.adopt_block(d.hash, parent, tokens, salt);
    if (id == kv::kNoBlock) break;
    held.push_back(id);
    size_t at = 0;
    const int32_t one[] = {id};
    bool ok = true;
    for (size_t l = 0; l < layer_bytes_.size() && ok; ++l) {
      ok = bool(runner_.import_kv(int64_t(l), one, d.payload.data() + at));
      at += layer_bytes_[l];
    }
    if (!ok) {  // never serve a block whose KV did not arrive
      kv.drop_cached(id);
      break;
    }
    ++counters_.loaded_blocks[r.store[k]];
    parent = id;
    parent_hash = d.hash;
    ++loaded;
  }
  for (auto b = held.rbegin(); b != held.rend(); ++b) kv.unhold(*b);
  if (loaded > 0) ++counters_.loads;
  counters_.load_ns += r.ns + std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  return loaded;
}

int32_t KvTiering::load_prefix(kv::KvManager& kv, std::span<const int32_t> prompt, const std::string& salt) {
  const Plan p = plan(kv, prompt, salt);
  if (p.hashes.empty()) return 0;
  return import(kv, prompt, salt, read(p, prompt, salt));
}

}  // namespace kvasir::engine
