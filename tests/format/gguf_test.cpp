// GGUF reader: round trips through the writer, every shared model parses, and truncated,
// bit-flipped and hand-crafted hostile files give clear errors (never a crash or giant allocation).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "format/gguf.h"
#include "format/mapped_file.h"

using namespace kvasir;
using gguf::Value;
using gguf::ValueType;

namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

gguf::Writer sample_writer() {
  gguf::Writer w;
  w.set("general.architecture", Value::of_string("llama"));
  w.set("test.u32", Value::of_u32(7));
  w.set("test.i32", Value::of_i32(-3));
  w.set("test.f32", Value::of_f32(1.5f));
  w.set("test.bool", Value::of_bool(true));
  std::vector<Value> strs = {Value::of_string("a"), Value::of_string(""), Value::of_string("héllo")};
  w.set("test.strings", Value::of_array(ValueType::STRING, strs));
  std::vector<Value> inner = {Value::of_array(ValueType::U32, {Value::of_u32(1), Value::of_u32(2)}),
                              Value::of_array(ValueType::U32, {})};
  w.set("test.nested", Value::of_array(ValueType::ARRAY, inner));
  w.add_tensor("a", DType::F32, {4, 2}, f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  w.add_tensor("b", DType::F32, {3}, f32_bytes({9, 10, 11}));
  return w;
}

void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }
void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }

// Byte offset of the first tensor info (just after the metadata) in sample_writer()'s output.
size_t find(const std::vector<uint8_t>& b, const std::string& s) {
  auto it = std::search(b.begin(), b.end(), s.begin(), s.end());
  return size_t(it - b.begin());
}

}  // namespace

TEST(Gguf, RoundTripsEveryValueType) {
  const auto bytes = sample_writer().to_bytes();
  auto f = gguf::parse(bytes);
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->version, 3u);
  EXPECT_EQ(*f->get_string("general.architecture"), "llama");
  EXPECT_EQ(*f->get_int("test.u32"), 7);
  EXPECT_EQ(*f->get_int("test.i32"), -3);
  EXPECT_FLOAT_EQ(float(*f->get_float("test.f32")), 1.5f);
  EXPECT_TRUE(*f->get_bool("test.bool"));
  auto strs = f->get_array("test.strings", ValueType::STRING);
  ASSERT_TRUE(strs.ok());
  ASSERT_EQ((*strs)->items.size(), 3u);
  EXPECT_EQ((*strs)->items[2].str, "héllo");
  const Value* nested = f->find("test.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->items.size(), 2u);
  EXPECT_EQ(nested->items[0].items[1].u, 2u);
  const auto* a = f->tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne[0], 4);
  EXPECT_EQ(a->ne[1], 2);
  EXPECT_EQ(a->nbytes, 32u);
  float v[8];
  std::memcpy(v, a->data, 32);
  EXPECT_EQ(v[7], 8.f);
  const auto* b = f->tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->offset % 32, 0u);
  EXPECT_EQ(reinterpret_cast<const float*>(b->data)[2], 11.f);
}

TEST(Gguf, TypedGettersNameTheKey) {
  const auto bytes = sample_writer().to_bytes();
  auto f = gguf::parse(bytes);
  ASSERT_TRUE(f.ok());
  auto missing = f->get_int("nope.key");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("nope.key"), std::string::npos);
  auto wrong = f->get_int("general.architecture");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().find("general.architecture"), std::string::npos);
}

TEST(Gguf, CustomAlignment) {
  const auto bytes = sample_writer().to_bytes(64);
  auto f = gguf::parse(bytes);
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->alignment, 64u);
  EXPECT_EQ(f->data_offset % 64, 0u);
  EXPECT_EQ(f->tensor("b")->offset % 64, 0u);
}

TEST(Gguf, EverySharedModelParses) {
  int n = 0;
  for (const auto& dir : {std::string(KVASIR_SHARED_DIR) + "/models", std::string(KVASIR_SHARED_DIR) + "/models/vocab"}) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() != ".gguf") continue;
      auto file = MappedFile::open(e.path().string());
      ASSERT_TRUE(file.ok()) << file.error();
      auto f = gguf::parse(file->bytes());
      EXPECT_TRUE(f.ok()) << e.path() << ": " << f.error();
      ++n;
    }
  }
  EXPECT_GT(n, 20);
}

TEST(Gguf, EveryTruncationIsAnError) {
  const auto bytes = sample_writer().to_bytes();
  // The last tensor ends 12 bytes into its 32-byte padded slot; any cut before that must fail.
  const size_t needed = bytes.size() - 32 + 12;
  for (size_t n = 0; n < needed; ++n) {
    std::span<const uint8_t> cut(bytes.data(), n);
    auto f = gguf::parse(cut);
    EXPECT_FALSE(f.ok()) << "truncated to " << n << " bytes parsed";
    if (!f.ok()) {
      EXPECT_NE(f.error().find("gguf:"), std::string::npos);
    }
  }
}

TEST(Gguf, BitFlipsNeverCrash) {
  const auto bytes = sample_writer().to_bytes();
  std::mt19937 rng(42);
  int errors = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    auto copy = bytes;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) copy[rng() % copy.size()] ^= uint8_t(1u << (rng() % 8));
    auto f = gguf::parse(copy);
    if (!f.ok()) {
      ++errors;
      EXPECT_FALSE(f.error().empty());
    } else {
      for (const auto& t : f->tensors) {  // whatever parses must be self-consistent
        EXPECT_GE(t.data, copy.data());
        EXPECT_LE(t.data + t.nbytes, copy.data() + copy.size());
      }
    }
  }
  EXPECT_GT(errors, 100);
}

TEST(Gguf, HostileHeadersAreRejected) {
  const auto good = sample_writer().to_bytes();
  auto expect_error = [](std::vector<uint8_t> b, const std::string& fragment) {
    auto f = gguf::parse(b);
    ASSERT_FALSE(f.ok()) << "expected error containing '" << fragment << "'";
    EXPECT_NE(f.error().find(fragment), std::string::npos) << f.error();
  };
  {
    auto b = good;
    b[0] = 'X';
    expect_error(b, "bad magic");
  }
  {
    auto b = good;
    put_u32(b, 4, 99);
    expect_error(b, "version 99");
  }
  {
    auto b = good;
    put_u64(b, 8, uint64_t(1) << 60);  // tensor count
    expect_error(b, "tensor count");
  }
  {
    auto b = good;
    put_u64(b, 16, uint64_t(1) << 40);  // kv count
    expect_error(b, "metadata count");
  }
  {
    auto b = good;
    put_u64(b, 24, uint64_t(1) << 62);  // length of the first key string
    expect_error(b, "string length");
  }
  {
    // Array claiming 2^40 elements: rejected before any allocation.
    auto b = good;
    const size_t at = find(b, "test.strings") + std::strlen("test.strings") + 4 + 4;
    put_u64(b, at, uint64_t(1) << 40);
    expect_error(b, "test.strings");
  }
}

TEST(Gguf, HostileTensorInfosAreRejected) {
  const auto good = sample_writer().to_bytes();
  // Tensor info "a": u64 len + "a", u32 n_dims, u64 ne[2], u32 type, u64 offset.
  const std::string key("\x01\0\0\0\0\0\0\0a", 9);  // last match: the metadata has a string "a" too
  const size_t info = size_t(std::find_end(good.begin(), good.end(), key.begin(), key.end()) - good.begin());
  ASSERT_LT(info, good.size());
  const size_t dims = info + 9, ne0 = dims + 4, ne1 = ne0 + 8, type = ne1 + 8, offset = type + 4;
  auto expect_error = [](std::vector<uint8_t> b, const std::string& fragment) {
    auto f = gguf::parse(b);
    ASSERT_FALSE(f.ok()) << "expected error containing '" << fragment << "'";
    EXPECT_NE(f.error().find(fragment), std::string::npos) << f.error();
  };
  { auto b = good; put_u32(b, dims, 9); expect_error(b, "tensor 'a' has 9 dims"); }
  { auto b = good; put_u64(b, ne0, uint64_t(1) << 40); put_u64(b, ne1, uint64_t(1) << 40); expect_error(b, "overflows"); }
  { auto b = good; put_u64(b, ne0, 1000); expect_error(b, "past the end"); }
  { auto b = good; put_u64(b, ne0, 0); expect_error(b, "invalid dimension"); }
  { auto b = good; put_u32(b, type, 8); expect_error(b, "not a multiple of the Q8_0 block size"); }
  { auto b = good; put_u32(b, type, 77); expect_error(b, "unsupported type 77"); }
  { auto b = good; put_u64(b, offset, 7); expect_error(b, "not aligned"); }
  { auto b = good; put_u64(b, offset, uint64_t(1) << 50); expect_error(b, "past the end"); }
  { auto b = good; put_u64(b, offset, 32); expect_error(b, "overlap"); }
}

TEST(Gguf, MissingFileIsAnError) {
  auto f = MappedFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("/nonexistent/model.gguf"), std::string::npos);
}
