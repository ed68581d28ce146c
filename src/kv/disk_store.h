// The disk tier of the KV cache: full KV blocks as files, content-addressed by the chained block
// hash that keys the prefix cache (model identity and tenant salt are in its root), each file
// carrying what a lookup must match besides the hash: its parent's hash, its tokens and (first
// blocks) its salt, and the KV format it was written in. Files are written by a background thread
// (to a temporary name, then renamed: a crash leaves a whole file or none) and checked on read (a
// 64-bit checksum over header and payload): a torn, corrupted, truncated or foreign file is never
// returned, it is deleted and counts as a miss. The folder holds at most max_bytes; the least
// recently used files go first (use is a file's modification time, so the order survives a
// restart). A full disk or an unwritable folder loses writes, never fails a caller.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "kv/block_hash.h"
#include "kv/block_store.h"
#include "kv/block_write_queue.h"

namespace kvasir::kv {

struct DiskStoreOptions {
  std::string dir;
  uint64_t max_bytes = 0;
  // What a block's bytes mean (the runner's kv_format(): model identity, KV types, block size):
  // files of another format live in another subfolder and are never read.
  std::string format;
  uint64_t max_pending_bytes = 256u << 20;  // queued writes beyond this are dropped
};

class DiskStore : public BlockStore {
 public:
  static Result<std::unique_ptr<DiskStore>> open(const DiskStoreOptions& options);
  ~DiskStore() override;  // writes what is queued, then stops
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  const char* tier() const override { return "disk"; }
  bool contains(BlockHash hash) const override;
  // The block, verified; nullopt when absent or refused.
  std::optional<StoredBlock> read(BlockHash hash) override;
  // Queues a block for writing (a copy is taken); a hash already stored or queued is skipped.
  void write_async(StoredBlock block) override;
  void flush() override;  // returns once every queued write is done
  StoreCounters counters() const override;
  const std::string& folder() const { return folder_; }

 private:
  explicit DiskStore(const DiskStoreOptions& options);
  std::string path_of(BlockHash hash) const;
  void store(const StoredBlock& block);  // on the queue's thread
  void index_add(BlockHash hash, uint64_t bytes, uint64_t use);
  void index_remove(BlockHash hash);
  void evict_over_budget();

  DiskStoreOptions options_;
  std::string folder_;
  mutable std::mutex mu_;
  struct Entry {
    uint64_t bytes = 0, use = 0;
  };
  std::unordered_map<BlockHash, Entry> index_;
  std::map<std::pair<uint64_t, BlockHash>, bool> lru_;  // (use, hash), oldest first
  uint64_t clock_ = 0;
  std::unordered_map<BlockHash, bool> queued_;
  bool warned_ = false;
  StoreCounters counters_;
  std::unique_ptr<BlockWriteQueue> queue_;  // last: drained before the rest goes
};

}  // namespace kvasir::kv
