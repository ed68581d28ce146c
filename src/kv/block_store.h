// A tier of the KV cache beyond the runner's memory: full KV blocks by chained block hash (model
// identity and tenant salt are in its root), each carrying what a lookup must match besides the
// hash (its parent's hash, its tokens, a first block's salt) and the KV format it was written in.
// Stores: a folder (disk_store.h) and a shared Redis/Valkey server (redis_store.h). Reads verify
// and never return a torn, corrupted or foreign block; writes happen off the caller's thread and a
// store that fails loses them, never fails the caller.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kv/block_hash.h"

namespace kvasir::kv {

struct StoredBlock {
  BlockHash hash = 0, parent = 0;  // parent: the previous block's hash, or the chain's root
  std::string salt;                // first blocks only
  std::vector<int32_t> tokens;
  std::vector<uint8_t> payload;
};

struct StoreCounters {
  int64_t hits = 0, misses = 0, corrupt = 0;          // reads: returned, absent, refused
  int64_t writes = 0, write_errors = 0, dropped = 0;  // blocks written, failed, dropped (queue full or store down)
  int64_t evictions = 0;
  uint64_t bytes_read = 0, bytes_written = 0, bytes_stored = 0;
  int64_t files = 0;
};

class BlockStore {
 public:
  virtual ~BlockStore() = default;
  virtual const char* tier() const = 0;  // "disk", "redis": the metrics' label
  // false: certainly absent (a cheap check before read); true: read() may find it.
  virtual bool contains(BlockHash hash) const = 0;
  virtual std::optional<StoredBlock> read(BlockHash hash) = 0;
  virtual void write_async(StoredBlock block) = 0;
  virtual void flush() = 0;
  virtual StoreCounters counters() const = 0;
  // The same text on every instance that shares this store's blocks (a router places requests by
  // it); empty for a store private to this process, or while a shared one has not been reached.
  virtual std::string pool_id() const { return {}; }
};

// 16 lower-case hex digits: how stores name blocks and formats.
inline std::string hash_hex(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[size_t(i)] = kDigits[v & 15];
  return out;
}

// A block's bytes in a store (magic, header, payload, a 64-bit checksum over all of it) and their
// parse, which takes any bytes without reading past them and refuses another `format`.
std::vector<uint8_t> encode_block(const StoredBlock& block, const std::string& format);
std::optional<StoredBlock> decode_block(const uint8_t* data, size_t size, const std::string& format);

}  // namespace kvasir::kv
