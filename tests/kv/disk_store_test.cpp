// The KV disk tier's store: what is written comes back byte for byte (also after a reopen), a
// torn, corrupted, truncated or foreign file is refused and deleted, the size bound holds under
// churn with the least recently used files going first, and a folder that vanished loses writes
// without an error to anyone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kv/disk_store.h"

namespace kvasir::kv {
namespace {

namespace fs = std::filesystem;

StoredBlock block(uint64_t hash, size_t payload = 1000) {
  StoredBlock b{.hash = hash, .parent = hash * 7 + 1, .salt = hash % 2 ? "tenant" : "", .tokens = {}, .payload = {}};
  for (int i = 0; i < 16; ++i) b.tokens.push_back(int32_t(hash * 31 + uint64_t(i)));
  for (size_t i = 0; i < payload; ++i) b.payload.push_back(uint8_t(hash * 13 + i));
  return b;
}

bool same(const StoredBlock& a, const StoredBlock& b) {
  return a.hash == b.hash && a.parent == b.parent && a.salt == b.salt && a.tokens == b.tokens && a.payload == b.payload;
}

class DiskStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvasir_disk_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<DiskStore> open(uint64_t max_bytes = 1 << 20, const std::string& format = "model-a/f16") {
    auto s = DiskStore::open({.dir = dir_.string(), .max_bytes = max_bytes, .format = format});
    EXPECT_TRUE(s) << s.error();
    return s ? std::move(*s) : nullptr;
  }
  std::string file_of(const DiskStore& s, uint64_t hash) {
    char name[32];
    std::snprintf(name, sizeof name, "%016llx.kvb", static_cast<unsigned long long>(hash));
    return s.folder() + "/" + name;
  }
  fs::path dir_;
};

TEST_F(DiskStoreTest, WhatIsWrittenComesBackAlsoAfterAReopen) {
  {
    auto s = open();
    for (uint64_t h = 1; h <= 5; ++h) s->write_async(block(h));
    s->flush();
    EXPECT_EQ(s->counters().writes, 5);
    for (uint64_t h = 1; h <= 5; ++h) {
      auto b = s->read(h);
      ASSERT_TRUE(b) << h;
      EXPECT_TRUE(same(*b, block(h)));
    }
    EXPECT_FALSE(s->read(99));
    EXPECT_EQ(s->counters().misses, 1);
    std::ofstream(s->folder() + "/0000000000000063.kvb.tmp") << "a crash left this";
  }
  auto s = open();
  EXPECT_EQ(s->counters().files, 5);
  for (uint64_t h = 1; h <= 5; ++h) EXPECT_TRUE(s->contains(h));
  EXPECT_TRUE(same(*s->read(3), block(3)));
  EXPECT_FALSE(fs::exists(s->folder() + "/0000000000000063.kvb.tmp"));  // leftovers of a crash go
}

TEST_F(DiskStoreTest, TornCorruptedTruncatedAndForeignFilesAreRefusedAndDeleted) {
  auto s = open();
  for (uint64_t h = 1; h <= 4; ++h) s->write_async(block(h));
  s->flush();
  auto rewrite = [&](uint64_t h, auto edit) {
    std::ifstream in(file_of(*s, h), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    edit(bytes);
    std::ofstream(file_of(*s, h), std::ios::binary | std::ios::trunc) << bytes;
  };
  rewrite(1, [](std::string& b) { b[b.size() / 2] ^= 0x01; });  // one flipped bit in the payload
  rewrite(2, [](std::string& b) { b.resize(b.size() / 3); });     // torn
  rewrite(3, [](std::string& b) { b.clear(); });                  // empty
  for (uint64_t h = 1; h <= 3; ++h) {
    EXPECT_FALSE(s->read(h)) << h;
    EXPECT_FALSE(fs::exists(file_of(*s, h))) << h;
    EXPECT_FALSE(s->contains(h)) << h;
  }
  EXPECT_EQ(s->counters().corrupt, 3);
  EXPECT_TRUE(s->read(4));
  // A file of another model (or KV type) in this folder: its format does not match.
  const auto foreign = encode_block(block(5), "model-b/q8_0");
  std::ofstream(file_of(*s, 5), std::ios::binary) << std::string(foreign.begin(), foreign.end());
  auto reopened = open();
  EXPECT_TRUE(reopened->contains(5));
  EXPECT_FALSE(reopened->read(5));
  EXPECT_EQ(reopened->counters().corrupt, 1);
  // Another format has a folder of its own: the same hashes are not seen there at all.
  auto other = open(1 << 20, "model-b/q8_0");
  EXPECT_NE(other->folder(), s->folder());
  EXPECT_FALSE(other->contains(4));
  // decode takes any bytes without reading past them.
  const auto good = encode_block(block(6), "f");
  for (size_t n = 0; n < good.size(); ++n) EXPECT_FALSE(decode_block(good.data(), n, "f")) << n;
  EXPECT_TRUE(decode_block(good.data(), good.size(), "f"));
}

TEST_F(DiskStoreTest, TheSizeBoundHoldsUnderChurnAndRecentlyReadBlocksStay) {
  const uint64_t file = encode_block(block(1, 4000), "model-a/f16").size();
  auto s = open(10 * file);
  for (uint64_t h = 1; h <= 10; ++h) s->write_async(block(h, 4000));
  s->flush();
  ASSERT_TRUE(s->read(1));  // block 1 is now the most recently used
  for (uint64_t h = 11; h <= 200; ++h) {
    s->write_async(block(h, 4000));
    if (h % 7 == 0) s->flush();
    if (h % 3 == 0) (void)s->read(1);
  }
  s->flush();
  const auto c = s->counters();
  EXPECT_LE(c.bytes_stored, 10 * file);
  EXPECT_EQ(c.files, 10);
  EXPECT_EQ(c.evictions, 190);
  EXPECT_TRUE(s->contains(1));
  EXPECT_FALSE(s->contains(2));
  size_t on_disk = 0;
  for (const auto& f : fs::directory_iterator(s->folder())) on_disk += f.path().extension() == ".kvb";
  EXPECT_EQ(on_disk, 10u);
}

TEST_F(DiskStoreTest, AFolderThatVanishedLosesWritesQuietly) {
  auto s = open();
  s->write_async(block(1));
  s->flush();
  fs::remove_all(dir_);  // the disk went away (or filled up): writes fail
  s->write_async(block(2));
  s->flush();
  EXPECT_EQ(s->counters().write_errors, 1);
  EXPECT_FALSE(s->contains(2));
  EXPECT_FALSE(s->read(1));  // its file is gone too: a miss, not an error
}

}  // namespace
}  // namespace kvasir::kv
