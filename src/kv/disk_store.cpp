#include "kv/disk_store.h"

#include "core/fnv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace kvasir::kv {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'K', 'V', 'B', 'L', 'O', 'C', 'K', '1'};
constexpr size_t kMaxTokens = 1 << 12, kMaxSalt = 1 << 16, kMaxFormat = 1 << 12;
constexpr uint64_t kMaxPayload = uint64_t(1) << 32;

uint64_t fnv64(uint64_t h, const uint8_t* p, size_t n) { return fnv1a_words(h, p, n); }

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

struct Reader {
  const uint8_t* p;
  size_t left;
  template <typename T>
  bool get(T& v) {
    if (left < sizeof v) return false;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v, left -= sizeof v;
    return true;
  }
  bool bytes(void* dst, size_t n) {
    if (left < n) return false;
    std::memcpy(dst, p, n);
    p += n, left -= n;
    return true;
  }
};

uint64_t now_use() {
  return uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count());
}

}  // namespace

// magic, u64 hash, u64 parent, u32 n_tokens, tokens, u32 salt length, salt, u32 format length,
// format, u64 payload length, payload, u64 checksum of everything before it.
std::vector<uint8_t> encode_block(const StoredBlock& b, const std::string& format) {
  std::vector<uint8_t> out(kMagic, kMagic + 8);
  put(out, b.hash);
  put(out, b.parent);
  put(out, uint32_t(b.tokens.size()));
  for (int32_t t : b.tokens) put(out, t);
  put(out, uint32_t(b.salt.size()));
  out.insert(out.end(), b.salt.begin(), b.salt.end());
  put(out, uint32_t(format.size()));
  out.insert(out.end(), format.begin(), format.end());
  put(out, uint64_t(b.payload.size()));
  out.insert(out.end(), b.payload.begin(), b.payload.end());
  put(out, fnv64(kFnvOffset, out.data(), out.size()));
  return out;
}

std::optional<StoredBlock> decode_block(const uint8_t* data, size_t size, const std::string& format) {
  if (size < 8 + 8 || std::memcmp(data, kMagic, 8) != 0) return std::nullopt;
  uint64_t sum;
  std::memcpy(&sum, data + size - 8, 8);
  if (fnv64(kFnvOffset, data, size - 8) != sum) return std::nullopt;
  Reader r{data + 8, size - 16};
  StoredBlock b;
  uint32_t n = 0;
  if (!r.get(b.hash) || !r.get(b.parent) || !r.get(n) || n > kMaxTokens) return std::nullopt;
  b.tokens.resize(n);
  if (!r.bytes(b.tokens.data(), size_t(n) * 4)) return std::nullopt;
  if (!r.get(n) || n > kMaxSalt) return std::nullopt;
  b.salt.resize(n);
  if (!r.bytes(b.salt.data(), n)) return std::nullopt;
  if (!r.get(n) || n > kMaxFormat || n != format.size()) return std::nullopt;
  std::string f(n, '\0');
  if (!r.bytes(f.data(), n) || f != format) return std::nullopt;
  uint64_t len = 0;
  if (!r.get(len) || len > kMaxPayload || len != r.left) return std::nullopt;
  b.payload.assign(r.p, r.p + len);
  return b;
}

DiskStore::DiskStore(const DiskStoreOptions& options) : options_(options) {}

Result<std::unique_ptr<DiskStore>> DiskStore::open(const DiskStoreOptions& options) {
  if (options.dir.empty()) return Error{"the KV disk tier needs a folder", ErrorCode::invalid_argument};
  if (options.max_bytes == 0) return Error{"the KV disk tier needs a size above 0", ErrorCode::invalid_argument};
  auto s = std::unique_ptr<DiskStore>(new DiskStore(options));
  // One subfolder per format: another model's or another KV type's blocks are never looked at.
  s->folder_ = options.dir + "/" + hash_hex(fnv64(kFnvOffset,
                                               reinterpret_cast<const uint8_t*>(options.format.data()),
                                               options.format.size()));
  std::error_code ec;
  fs::create_directories(s->folder_, ec);
  if (ec) return Error{"cannot create the KV disk tier folder '" + s->folder_ + "': " + ec.message()};
  // The index from what is there: names that parse as hashes, their size and last use (mtime).
  // Leftover temporary files of a crash are removed.
  for (const auto& f : fs::directory_iterator(s->folder_, ec)) {
    const std::string name = f.path().filename().string();
    if (name.find(".tmp") != std::string::npos) {
      fs::remove(f.path(), ec);
      continue;
    }
    if (name.size() != 20 || !name.ends_with(".kvb")) continue;
    char* end = nullptr;
    const BlockHash h = std::strtoull(name.substr(0, 16).c_str(), &end, 16);
    struct stat st {};
    if (::stat(f.path().c_str(), &st) != 0) continue;
    s->index_add(h, uint64_t(st.st_size), uint64_t(st.st_mtim.tv_sec) * 1000000 + uint64_t(st.st_mtim.tv_nsec / 1000));
  }
  s->evict_over_budget();
  s->queue_ = std::make_unique<BlockWriteQueue>(options.max_pending_bytes, [p = s.get()](const StoredBlock& b) { p->store(b); });
  return s;
}

DiskStore::~DiskStore() { queue_.reset(); }

std::string DiskStore::path_of(BlockHash hash) const { return folder_ + "/" + hash_hex(hash) + ".kvb"; }

void DiskStore::index_add(BlockHash hash, uint64_t bytes, uint64_t use) {
  if (auto it = index_.find(hash); it != index_.end()) index_remove(hash);
  index_[hash] = {bytes, use};
  lru_[{use, hash}] = true;
  counters_.bytes_stored += bytes;
  ++counters_.files;
}

void DiskStore::index_remove(BlockHash hash) {
  auto it = index_.find(hash);
  if (it == index_.end()) return;
  lru_.erase({it->second.use, hash});
  counters_.bytes_stored -= it->second.bytes;
  --counters_.files;
  index_.erase(it);
}

void DiskStore::evict_over_budget() {
  while (counters_.bytes_stored > options_.max_bytes && !lru_.empty()) {
    const BlockHash h = lru_.begin()->first.second;
    index_remove(h);
    std::error_code ec;
    fs::remove(path_of(h), ec);
    ++counters_.evictions;
  }
}

bool DiskStore::contains(BlockHash hash) const {
  std::lock_guard lock(mu_);
  return index_.count(hash) != 0;
}

std::optional<StoredBlock> DiskStore::read(BlockHash hash) {
  {
    std::lock_guard lock(mu_);
    if (!index_.count(hash)) {
      ++counters_.misses;
      return std::nullopt;
    }
  }
  const std::string path = path_of(hash);
  std::vector<uint8_t> bytes;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    std::fseek(f, 0, SEEK_END);
    const long n = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    if (n > 0 && uint64_t(n) <= kMaxPayload + (1 << 20)) {
      bytes.resize(size_t(n));
      if (std::fread(bytes.data(), 1, bytes.size(), f) != bytes.size()) bytes.clear();
    }
    std::fclose(f);
  }
  auto block = bytes.empty() ? std::nullopt : decode_block(bytes.data(), bytes.size(), options_.format);
  std::lock_guard lock(mu_);
  if (!block || block->hash != hash) {  // torn, corrupted, foreign: recompute, and never again
    index_remove(hash);
    std::error_code ec;
    fs::remove(path, ec);
    ++counters_.corrupt;
    ++counters_.misses;
    return std::nullopt;
  }
  ++counters_.hits;
  counters_.bytes_read += bytes.size();
  // Most recently used now, on disk too (the order survives a restart).
  if (auto it = index_.find(hash); it != index_.end()) {
    lru_.erase({it->second.use, hash});
    it->second.use = std::max(now_use(), ++clock_);
    lru_[{it->second.use, hash}] = true;
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return block;
}

void DiskStore::write_async(StoredBlock block) {
  const BlockHash hash = block.hash;
  {
    std::lock_guard lock(mu_);
    if (index_.count(hash) || queued_.count(hash)) return;
    queued_[hash] = true;
  }
  if (queue_->push(std::move(block))) return;
  std::lock_guard lock(mu_);
  queued_.erase(hash);
  ++counters_.dropped;
}

void DiskStore::flush() { queue_->flush(); }

StoreCounters DiskStore::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

void DiskStore::store(const StoredBlock& b) {
  const std::vector<uint8_t> bytes = encode_block(b, options_.format);
  const std::string path = path_of(b.hash), tmp = path + ".tmp";
  bool ok = false;
  if (FILE* f = std::fopen(tmp.c_str(), "wb")) {
    ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    ok = (std::fclose(f) == 0) && ok;
  }
  std::error_code ec;
  if (ok) {
    fs::rename(tmp, path, ec);
    ok = !ec;
  }
  std::lock_guard lock(mu_);
  queued_.erase(b.hash);
  if (!ok) {
    fs::remove(tmp, ec);
    ++counters_.write_errors;
    if (!warned_) {  // a full disk, a removed folder: the tier loses blocks, serving goes on
      warned_ = true;
      std::fprintf(stderr, "kvasir: KV disk tier: cannot write %s (disk full or folder gone?); blocks are "
                           "recomputed instead\n", path.c_str());
    }
    return;
  }
  ++counters_.writes;
  counters_.bytes_written += bytes.size();
  index_add(b.hash, bytes.size(), std::max(now_use(), ++clock_));
  evict_over_budget();
}

}  // namespace kvasir::kv
