// The shared tier of the KV cache: blocks in a Redis (or Valkey) server that every instance of a
// model reaches, so a prefix one instance computed is read back by the others instead of
// recomputed. Keys are "kvasir:kv:<format>:<chained hash>" (the format: model identity, KV types,
// block size), values the same verified encoding as the disk tier's files; the server bounds its
// memory itself (maxmemory with allkeys-lru). A server that is down or slow (every command has a
// timeout) costs misses and dropped writes and one log line, never an error: the tier retries a
// connection at most every two seconds.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"
#include "kv/block_store.h"
#include "kv/block_write_queue.h"

struct redisContext;

namespace kvasir::kv {

struct RedisStoreOptions {
  std::string url;     // redis://HOST:PORT
  std::string format;  // as DiskStoreOptions::format
  int timeout_ms = 500;
  uint64_t max_pending_bytes = 256u << 20;
};

class RedisStore : public BlockStore {
 public:
  // Checks the URL; the server need not be up yet.
  static Result<std::unique_ptr<RedisStore>> open(const RedisStoreOptions& options);
  ~RedisStore() override;

  const char* tier() const override { return "redis"; }
  bool contains(BlockHash hash) const override;  // false only while the server is down
  std::optional<StoredBlock> read(BlockHash hash) override;
  void write_async(StoredBlock block) override;
  void flush() override;
  StoreCounters counters() const override;
  // The server's "kvasir:pool-id" (set once by the first instance to reach it, with SET NX) and
  // the block format: instances of one model on one server report the same.
  std::string pool_id() const override;

 private:
  explicit RedisStore(const RedisStoreOptions& options);
  struct Conn;
  // A live connection (reconnecting when due); null while the server is down.
  redisContext* connect(std::unique_ptr<Conn>& conn);
  void mark_down(std::unique_ptr<Conn>& conn, const std::string& why);
  void learn_pool_id(redisContext* c);
  std::string key_of(BlockHash hash) const;
  void store(const StoredBlock& block);  // on the queue's thread

  RedisStoreOptions options_;
  std::string host_, prefix_;
  int port_ = 6379;
  mutable std::mutex mu_;  // counters and state
  std::mutex read_mu_;     // the reading connection
  std::unique_ptr<Conn> read_conn_, write_conn_;
  std::chrono::steady_clock::time_point retry_at_{};
  bool down_ = false;
  StoreCounters counters_;
  std::string pool_id_;
  std::unique_ptr<BlockWriteQueue> queue_;  // last: drained before the rest goes
};

}  // namespace kvasir::kv
