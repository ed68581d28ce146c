// The special-token partition has two strategies (occurrence list, per-token scan for texts
// with very many occurrences); they must split every text identically.
#include <gtest/gtest.h>

#include <random>

#include "synthetic_vocab.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer_test_util.h"

namespace kvasir {
namespace {

void expect_same_partition(const Tokenizer& t, const std::vector<std::string>& pieces, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, pieces.size() - 1), len(0, 40);
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (size_t k = len(rng); k > 0; --k) s += pieces[pick(rng)];
    for (bool parse : {true, false}) {
      std::vector<tok::Fragment> a, b;
      t.impl().special.partition(s, parse, a);
      t.impl().special.partition(s, parse, b, /*max_occurrences=*/0);
      ASSERT_EQ(a.size(), b.size()) << "text: " << s;
      for (size_t k = 0; k < a.size(); ++k) {
        EXPECT_EQ(a[k].token, b[k].token) << "text: " << s;
        if (a[k].token == tok::kNoToken) {
          EXPECT_EQ(a[k].begin, b[k].begin) << "text: " << s;
          EXPECT_EQ(a[k].end, b[k].end) << "text: " << s;
        }
      }
    }
  }
}

TEST(SpecialScan, SyntheticOverlapsAndStrips) {
  auto v = test::SyntheticVocab::spm({"A", "B", "C", "D", "AB", "BCD", "ABCD", "CDA", "<x>", "<x><x>"});
  for (const char* u : {"AB", "BCD", "CDA", "<x><x>"}) v.types[size_t(v.id(u))] = 4;
  v.types[size_t(v.id("<x>"))] = 3;
  v.types[size_t(v.id("ABCD"))] = 3;
  v.writer.set("general.name", gguf::Value::of_string("phi3"));  // rstrip on every special token
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  expect_same_partition(*t, {"A", "B", "C", "D", " ", "\n", "<x>", "<", "x", ">", "<s>", "</s>"}, 1);
}

TEST(SpecialScan, RealVocabularies) {
  for (const char* name : {"phi-3", "qwen2", "deepseek-llm", "falcon"}) {
    const Tokenizer* t = test::load_vocab(name);
    if (!t) continue;
    expect_same_partition(*t,
                          {"<s>", "</s>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|user|>", " ", "  ",
                           "\n", "a", ">>TITLE<<", ">>", "<<", "\xC3\xB8", "[PAD151646]", "<|end|>", "|", "<"},
                          2);
  }
  const Tokenizer* g = test::load_tokenizer_file(KVASIR_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf");
  if (g) expect_same_partition(*g, {" ", "  ", "\n", "\t", "x", "<start_of_turn>", "<end_of_turn>", "<unused1>"}, 3);
}

TEST(SpecialScan, LongWhitespaceRunsStayBounded) {
  const Tokenizer* g = test::load_tokenizer_file(KVASIR_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf");
  if (!g) GTEST_SKIP() << "Gemma 3 model not installed";
  // 2 MB of spaces: ~60 M whitespace-token occurrences; the scan path keeps memory small.
  const std::string s(2 << 20, ' ');
  const auto ids = g->encode(s, {.add_special = false});
  EXPECT_EQ(g->decode(ids), s);
}

}  // namespace
}  // namespace kvasir
