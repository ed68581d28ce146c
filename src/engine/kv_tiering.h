// The prefix cache's tiers beyond the runner's memory (a folder, a shared Redis/Valkey server), on
// the engine thread. Write-through: every block the prefix cache registers (its KV final while it
// stays cached) is copied out of the runner (ModelRunner::export_kv, every layer) and queued for
// every store, which write it off the step loop. Read on arrival: a new request's prompt continues
// its in-memory prefix hit with blocks from the first store that has each (a block found in a later
// store is copied into the earlier ones), checked (its parent's hash, its tokens, a first block's
// salt, its size), written into a fresh block (import_kv) and registered in the prefix cache
// before the scheduler looks; admission then finds them as it finds any cached block, and
// cached_tokens counts them.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <vector>

#include "kv/block_store.h"
#include "kv/kv_manager.h"
#include "runtime/model_runner.h"

namespace kvasir::engine {

struct KvTierCounters {
  int64_t loads = 0;          // requests that got blocks from a store
  int64_t load_ns = 0;        // time spent loading (read, check, import)
  int64_t saved_blocks = 0;   // blocks queued for writing
  int64_t prefetched_blocks = 0;  // of loaded_blocks: read off the engine thread (Engine::submit)
  std::vector<int64_t> loaded_blocks;  // per store: blocks read back and registered
};

class KvTiering {
 public:
  KvTiering(std::vector<std::shared_ptr<kv::BlockStore>> stores, runtime::ModelRunner& runner);
  // Queues the blocks registered since the last call (after each step's update).
  void save_new(kv::KvManager& kv);
  // Extends the cached prefix of `prompt` under `salt` with stored blocks; returns how many.
  // plan + read + import, all on the engine thread.
  int32_t load_prefix(kv::KvManager& kv, std::span<const int32_t> prompt, const std::string& salt);

  // The same in three parts, so that the reading (the slow part: files, the network) happens off
  // the engine thread (Engine::submit): plan and import run on the engine thread, read on any.
  struct Plan {
    size_t first = 0;                                // the first block past the in-memory hit
    std::vector<kv::BlockHash> hashes, parents;      // blocks first, first + 1, ... (chained)
  };
  Plan plan(const kv::KvManager& kv, std::span<const int32_t> prompt, const std::string& salt) const;
  struct Read {
    std::vector<kv::StoredBlock> blocks;  // a prefix of the plan's, checked
    std::vector<size_t> store;            // which store each came from
    int64_t ns = 0;
  };
  Read read(const Plan& plan, std::span<const int32_t> prompt, const std::string& salt);
  // Registers the blocks read that still follow the in-memory hit; returns how many.
  int32_t import(kv::KvManager& kv, std::span<const int32_t> prompt, const std::string& salt, Read read);
  const KvTierCounters& counters() const { return counters_; }
  void count_prefetched(int32_t n) { counters_.prefetched_blocks += n; }
  const std::vector<std::shared_ptr<kv::BlockStore>>& stores() const { return stores_; }

 private:
  // The block `hash` from the first store that has a valid one after `parent_hash`; copied into
  // the stores before it.
  std::optional<kv::StoredBlock> find(kv::BlockHash hash, kv::BlockHash parent_hash, std::span<const int32_t> tokens,
                                      bool first, const std::string& salt, size_t* store) const;

  std::vector<std::shared_ptr<kv::BlockStore>> stores_;
  runtime::ModelRunner& runner_;
  size_t block_tokens_;
  std::vector<size_t> layer_bytes_;
  size_t block_bytes_ = 0;
  KvTierCounters counters_;
};

}  // namespace kvasir::engine
