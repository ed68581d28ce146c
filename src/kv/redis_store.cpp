#include "kv/redis_store.h"

#include <hiredis/hiredis.h>

#include <cstdio>
#include <random>

#include "core/fnv.h"

namespace kvasir::kv {
namespace {

constexpr auto kRetryAfter = std::chrono::seconds(2);
constexpr const char* kPoolIdKey = "kvasir:pool-id";

timeval to_timeval(int ms) { return timeval{ms / 1000, (ms % 1000) * 1000}; }

}  // namespace

struct RedisStore::Conn {
  redisContext* c = nullptr;
  ~Conn() {
    if (c) redisFree(c);
  }
};

RedisStore::RedisStore(const RedisStoreOptions& options) : options_(options) {}

Result<std::unique_ptr<RedisStore>> RedisStore::open(const RedisStoreOptions& o) {
  constexpr std::string_view kScheme = "redis://";
  if (!std::string_view(o.url).starts_with(kScheme))
    return Error{"--kv-store takes redis://HOST:PORT, not '" + o.url + "'", ErrorCode::invalid_argument};
  std::string rest = o.url.substr(kScheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  auto s = std::unique_ptr<RedisStore>(new RedisStore(o));
  const size_t colon = rest.rfind(':');
  s->host_ = colon == std::string::npos ? rest : rest.substr(0, colon);
  if (colon != std::string::npos) {
    char* end = nullptr;
    const long port = std::strtol(rest.c_str() + colon + 1, &end, 10);
    if (*end != '\0' || port < 1 || port > 65535)
      return Error{"--kv-store: bad port in '" + o.url + "'", ErrorCode::invalid_argument};
    s->port_ = int(port);
  }
  if (s->host_.empty()) return Error{"--kv-store: no host in '" + o.url + "'", ErrorCode::invalid_argument};
  s->prefix_ = "kvasir:kv:" + hash_hex(fnv1a_words(kFnvOffset, o.format.data(), o.format.size())) + ":";
  s->queue_ = std::make_unique<BlockWriteQueue>(o.max_pending_bytes, [p = s.get()](const StoredBlock& b) { p->store(b); });
  {  // one try now, so the pool's identity is known from the start when the server is up
    std::lock_guard read_lock(s->read_mu_);
    s->connect(s->read_conn_);
  }
  return s;
}

RedisStore::~RedisStore() { queue_.reset(); }

std::string RedisStore::key_of(BlockHash hash) const { return prefix_ + hash_hex(hash); }

redisContext* RedisStore::connect(std::unique_ptr<Conn>& conn) {
  if (conn && conn->c && !conn->c->err) return conn->c;
  {
    std::lock_guard lock(mu_);
    if (down_ && std::chrono::steady_clock::now() < retry_at_) return nullptr;
  }
  conn = std::make_unique<Conn>();
  conn->c = redisConnectWithTimeout(host_.c_str(), port_, to_timeval(options_.timeout_ms));
  if (!conn->c || conn->c->err) {
    mark_down(conn, conn->c ? conn->c->errstr : "cannot allocate a connection");
    return nullptr;
  }
  redisSetTimeout(conn->c, to_timeval(options_.timeout_ms));
  learn_pool_id(conn->c);
  std::lock_guard lock(mu_);
  if (down_) std::fprintf(stderr, "kvasir: KV store %s is reachable again\n", options_.url.c_str());
  down_ = false;
  return conn->c;
}

void RedisStore::learn_pool_id(redisContext* c) {
  {
    std::lock_guard lock(mu_);
    if (!pool_id_.empty()) return;
  }
  std::random_device rd;
  const std::string mine = hash_hex((uint64_t(rd()) << 32) ^ rd());
  if (auto* r = static_cast<redisReply*>(redisCommand(c, "SET %s %s NX", kPoolIdKey, mine.c_str()))) freeReplyObject(r);
  auto* r = static_cast<redisReply*>(redisCommand(c, "GET %s", kPoolIdKey));
  if (r && r->type == REDIS_REPLY_STRING) {
    std::lock_guard lock(mu_);
    pool_id_ = std::string(r->str, r->len) + "/" + prefix_;
  }
  if (r) freeReplyObject(r);
}

std::string RedisStore::pool_id() const {
  std::lock_guard lock(mu_);
  return pool_id_;
}

void RedisStore::mark_down(std::unique_ptr<Conn>& conn, const std::string& why) {
  conn.reset();
  std::lock_guard lock(mu_);
  if (!down_)
    std::fprintf(stderr, "kvasir: KV store %s unreachable (%s); blocks are recomputed meanwhile\n", options_.url.c_str(),
                 why.c_str());
  down_ = true;
  retry_at_ = std::chrono::steady_clock::now() + kRetryAfter;
}

bool RedisStore::contains(BlockHash) const {
  std::lock_guard lock(mu_);
  return !down_ || std::chrono::steady_clock::now() >= retry_at_;
}

std::optional<StoredBlock> RedisStore::read(BlockHash hash) {
  std::lock_guard read_lock(read_mu_);
  redisContext* c = connect(read_conn_);
  auto miss = [&] {
    std::lock_guard lock(mu_);
    ++counters_.misses;
    return std::nullopt;
  };
  if (!c) return miss();
  const std::string key = key_of(hash);
  auto* r = static_cast<redisReply*>(redisCommand(c, "GET %b", key.data(), key.size()));
  if (!r) {
    mark_down(read_conn_, c->errstr);
    return miss();
  }
  std::optional<StoredBlock> block;
  size_t bytes = 0;
  if (r->type == REDIS_REPLY_STRING) {
    bytes = r->len;
    block = decode_block(reinterpret_cast<const uint8_t*>(r->str), r->len, options_.format);
    if (block && block->hash != hash) block.reset();
  }
  const bool present = r->type == REDIS_REPLY_STRING;
  freeReplyObject(r);
  std::lock_guard lock(mu_);
  if (!block) {
    ++counters_.misses;
    if (present) ++counters_.corrupt;  // another format's or a damaged value: recomputed
    return std::nullopt;
  }
  ++counters_.hits;
  counters_.bytes_read += bytes;
  return block;
}

void RedisStore::write_async(StoredBlock block) {
  {
    std::lock_guard lock(mu_);
    if (down_ && std::chrono::steady_clock::now() < retry_at_) {
      ++counters_.dropped;
      return;
    }
  }
  if (queue_->push(std::move(block))) return;
  std::lock_guard lock(mu_);
  ++counters_.dropped;
}

void RedisStore::flush() { queue_->flush(); }

StoreCounters RedisStore::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void RedisStore::store(const StoredBlock& b) {
  bool ok = false;
  if (redisContext* c = connect(write_conn_)) {
    const std::vector<uint8_t> value = encode_block(b, options_.format);
    const std::string key = key_of(b.hash);
    // NX: a block already there holds the same content; keep the first writer's.
    auto* r = static_cast<redisReply*>(redisCommand(c, "SET %b %b NX", key.data(), key.size(), value.data(), value.size()));
    if (!r) {
      mark_down(write_conn_, c->errstr);
    } else {
      ok = r->type != REDIS_REPLY_ERROR;
      freeReplyObject(r);
      if (ok) {
        std::lock_guard lock(mu_);
        ++counters_.writes;
        counters_.bytes_written += value.size();
      }
    }
  }
  if (!ok) {
    std::lock_guard lock(mu_);
    ++counters_.write_errors;
  }
}

}  // namespace kvasir::kv
