// Long inputs memoize segment -> ids within one encode call; the memo must never change ids.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/segment_cache.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer_test_util.h"

namespace kvasir {
namespace {

std::string long_text() {
  static const char* const kWords[] = {"the", "of", "license", "software", "you", "may", "copy", "  ", "\n",
                                       "caf\xC3\xA9", "\xE6\x97\xA5\xE6\x9C\xAC", "2024", ",", ".", "don't"};
  std::mt19937 rng(3);
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string s;
  while (s.size() < 3 * tok::SegmentCache::kMinText) {
    s += kWords[pick(rng)];
    s += ' ';
  }
  return s;
}

TEST(SegmentCache, SameIdsWithAndWithoutMemo) {
  const std::string text = long_text();
  for (const char* name : {"llama-spm", "llama-bpe", "qwen2"}) {
    const Tokenizer* t = test::load_vocab(name);
    if (!t) GTEST_SKIP() << "vocabulary not available: " << name;
    const tok::TokenizerImpl& impl = t->impl();
    std::vector<int32_t> cached, plain;
    tok::SegmentCache cache;
    if (t->kind() == TokenizerKind::spm) {
      std::string escaped;
      for (char c : text) escaped += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
      impl.spm.encode(escaped, cached, &cache);
      impl.spm.encode(escaped, plain, nullptr);
    } else {
      std::vector<tok::Span> words;
      impl.pre.split(text, words);
      for (const tok::Span& w : words) {
        const std::string_view word = std::string_view(text).substr(w.begin, w.end - w.begin);
        impl.bpe.encode_word(word, cached, &cache);
        impl.bpe.encode_word(word, plain, nullptr);
      }
    }
    EXPECT_EQ(cached, plain) << name;
    EXPECT_EQ(t->decode(t->encode(text, {.add_special = false})), text) << name;
  }
}

TEST(SegmentCache, StoresAndFindsKeys) {
  tok::SegmentCache cache;
  std::vector<int32_t> out = {7, 1, 2, 3};
  cache.store("abc", tok::hash_bytes("abc"), out, 1);
  for (int i = 0; i < 5000; ++i) {  // force growth
    const std::string k = "k" + std::to_string(i);
    std::vector<int32_t> v = {i};
    cache.store(k, tok::hash_bytes(k), v, 0);
  }
  std::vector<int32_t> got;
  EXPECT_TRUE(cache.lookup("abc", tok::hash_bytes("abc"), got));
  EXPECT_EQ(got, (std::vector<int32_t>{1, 2, 3}));
  got.clear();
  EXPECT_TRUE(cache.lookup("k4321", tok::hash_bytes("k4321"), got));
  EXPECT_EQ(got, (std::vector<int32_t>{4321}));
  EXPECT_FALSE(cache.lookup("missing", tok::hash_bytes("missing"), got));
}

}  // namespace
}  // namespace kvasir

namespace kvasir {
namespace {

// SentencePiece segments up to SpmEncoder::kSmallSegment characters are merged by a linear scan,
// longer ones by llama.cpp's priority queue; an encoder built to always use the queue must agree.
TEST(SpmMerge, ScanAgreesWithPriorityQueue) {
  for (const char* name : {"llama-spm", "phi-3", "stories260K"}) {
    const Tokenizer* t = test::load_vocab(name);
    if (!t) continue;
    tok::SpmEncoder queue_only;
    queue_only.build(t->impl().vocab, /*small_segment=*/0);
    std::mt19937 rng(17);
    static const char* const kParts[] = {"a", "e", "th", "ing", "tion", "\xE2\x96\x81", "\xE2\x96\x81\xE2\x96\x81",
                                         "x", "qu", "\xC3\xA9", "\xE6\x97\xA5", "1", "0", ".", "\n", "ly", "er"};
    std::uniform_int_distribution<size_t> pick(0, std::size(kParts) - 1), len(1, 40);
    for (int i = 0; i < 500; ++i) {
      std::string s;
      for (size_t k = len(rng); k > 0; --k) s += kParts[pick(rng)];
      std::vector<int32_t> a, b;
      t->impl().spm.encode(s, a);
      queue_only.encode(s, b);
      ASSERT_EQ(a, b) << name << ": " << s;
    }
  }
}

}  // namespace
}  // namespace kvasir
