// The prefix cache's tiers beyond the runner's memory, on the engine thread. Write-through: every
// block the prefix cache registers (its KV final while it stays cached) is copied out of the
// runner (ModelRunner::export_kv, every layer) and queued for the disk store, which writes it off
// the step loop. Read on arrival: a new request's prompt continues its in-memory prefix hit with
// blocks from disk, each checked (its parent's hash, its tokens, a first block's salt, its size),
// written into a fresh block (import_kv) and registered in the prefix cache, before the scheduler
// looks; admission then finds them as it finds any cached block, and cached_tokens counts them.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kv/disk_store.h"
#include "kv/kv_manager.h"
#include "runtime/model_runner.h"

namespace kvasir::engine {

struct KvTierCounters {
  int64_t loads = 0;            // requests that got blocks from disk
  int64_t loaded_blocks = 0;    // blocks read back and registered
  int64_t load_ns = 0;          // time spent loading (read, check, import)
  int64_t saved_blocks = 0;     // blocks queued for writing
};

class KvTiering {
 public:
  KvTiering(std::shared_ptr<kv::DiskStore> disk, runtime::ModelRunner& runner);
  // Queues the blocks registered since the last call (after each step's update).
  void save_new(kv::KvManager& kv);
  // Extends the cached prefix of `prompt` under `salt` with blocks from disk; returns how many.
  int32_t load_prefix(kv::KvManager& kv, std::span<const int32_t> prompt, const std::string& salt);
  const KvTierCounters& counters() const { return counters_; }
  const kv::DiskStore& disk() const { return *disk_; }

 private:
  std::shared_ptr<kv::DiskStore> disk_;
  runtime::ModelRunner& runner_;
  std::vector<size_t> layer_bytes_;
  size_t block_bytes_ = 0;
  KvTierCounters counters_;
};

}  // namespace kvasir::engine
