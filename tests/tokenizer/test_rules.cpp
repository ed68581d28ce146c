// Tokenizer rules on hand-made vocabularies: merge order, special-token priority and stripping,
// defaults, end-of-generation detection.
#include <gtest/gtest.h>

#include "synthetic_vocab.h"

namespace kvasir {
namespace {

using test::SyntheticVocab;
using Ids = std::vector<int32_t>;

constexpr EncodeOptions kPlain{.add_special = false, .parse_special = true};

TEST(SpmRules, HighestScoreMergesFirst) {
  // "abc": "ab" (score -259-3) vs "bc" (higher: listed earlier => larger score). "bc" wins.
  auto v = SyntheticVocab::spm({"a", "b", "c", "bc", "ab"});
  v.writer.set("tokenizer.ggml.add_space_prefix", gguf::Value::of_bool(false));
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->encode("abc", kPlain), (Ids{v.id("a"), v.id("bc")}));
  EXPECT_EQ(t->decode(t->encode("abc", kPlain)), "abc");
}

TEST(SpmRules, SpacePrefixAndByteFallback) {
  auto v = SyntheticVocab::spm({"\xE2\x96\x81", "a", "\xE2\x96\x81" "a"});
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_TRUE(t->add_bos());
  EXPECT_TRUE(t->add_space_prefix());
  // "a" -> "▁a"; "é" (C3 A9) is no token -> two byte tokens.
  EXPECT_EQ(t->encode("a", kPlain), (Ids{v.id("\xE2\x96\x81" "a")}));
  EXPECT_EQ(t->encode("a\xC3\xA9"), (Ids{1, v.id("\xE2\x96\x81" "a"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t->decode(t->encode("a\xC3\xA9"), true), "a\xC3\xA9");
  EXPECT_EQ(t->decode(t->encode("a\xC3\xA9"), false), "<s>a\xC3\xA9");
  EXPECT_EQ(t->piece(v.id("\xE2\x96\x81" "a")), " a");
  EXPECT_EQ(t->piece(3 + 0x41), "A");
}

TEST(SpecialRules, LongerTokenWinsWhereTheyOverlap) {
  // llama.cpp tries special tokens longest first: in "ABCD" the 3-byte "BCD" is taken before
  // the 2-byte "AB" is tried, even though "AB" starts earlier.
  auto v = SyntheticVocab::spm({"A", "B", "C", "D", "AB", "BCD"});
  v.types[size_t(v.id("AB"))] = 4;
  v.types[size_t(v.id("BCD"))] = 4;
  v.writer.set("tokenizer.ggml.add_space_prefix", gguf::Value::of_bool(false));
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->encode("ABCD", kPlain), (Ids{v.id("A"), v.id("BCD")}));
  EXPECT_EQ(t->encode("ABAB", kPlain), (Ids{v.id("AB"), v.id("AB")}));
}

TEST(SpecialRules, ParseSpecialOnlyAffectsControlTokens) {
  auto v = SyntheticVocab::spm({"<", ">", "x", "<u>"});
  v.types[size_t(v.id("<u>"))] = 4;  // user-defined: always matched
  v.writer.set("tokenizer.ggml.add_space_prefix", gguf::Value::of_bool(false));
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  const int32_t s = 1;  // "<s>", control
  EXPECT_EQ(t->encode("<s>x<u>", {.add_special = false, .parse_special = true}), (Ids{s, v.id("x"), v.id("<u>")}));
  const Ids plain = t->encode("<s>x<u>", {.add_special = false, .parse_special = false});
  EXPECT_EQ(plain, (Ids{v.id("<"), 3 + 's', v.id(">"), v.id("x"), v.id("<u>")}));
  EXPECT_EQ(t->decode(plain), "<s>x<u>");
}

TEST(SpecialRules, Phi3StripsWhitespaceAfterSpecialTokens) {
  auto v = SyntheticVocab::spm({"x", "<|user|>"});
  v.types[size_t(v.id("<|user|>"))] = 3;
  v.writer.set("general.name", gguf::Value::of_string("Phi3 test"));
  v.writer.set("tokenizer.ggml.add_space_prefix", gguf::Value::of_bool(false));
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->encode("<|user|> \n x", kPlain), (Ids{v.id("<|user|>"), v.id("x")}));
  // "<s>" is exempt; the space stays (as U+2581, spelled in bytes here).
  EXPECT_EQ(t->encode("<s> x", kPlain), (Ids{1, 3 + 0xE2, 3 + 0x96, 3 + 0x81, v.id("x")}));
}

TEST(SpecialRules, EndOfGenerationByText) {
  auto v = SyntheticVocab::spm({"<end_of_turn>", "<|im_end|>", "hello"});
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_TRUE(t->is_eog(2));  // eos
  EXPECT_TRUE(t->is_eog(v.id("<end_of_turn>")));
  EXPECT_TRUE(t->is_eog(v.id("<|im_end|>")));
  EXPECT_FALSE(t->is_eog(v.id("hello")));
  EXPECT_FALSE(t->is_eog(-1));
  // Found by text, they become control tokens: parsed as special, hidden by skip_special.
  EXPECT_TRUE(t->is_special(v.id("<end_of_turn>")));
  EXPECT_EQ(t->encode("<end_of_turn>", kPlain), (Ids{v.id("<end_of_turn>")}));
  EXPECT_EQ(t->decode(Ids{v.id("<end_of_turn>")}, true), "");
}

TEST(BpeRules, LowestRankMergesFirst) {
  // "abc": merges "b c" (rank 0) before "a b" (rank 1).
  auto v = SyntheticVocab::bpe({"ab", "bc", "abc"}, {"b c", "a b", "a bc"});
  v.writer.set("tokenizer.ggml.pre", gguf::Value::of_string("gpt-2"));
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->encode("abc"), (Ids{v.id("abc")}));
  EXPECT_EQ(t->encode("ab"), (Ids{v.id("ab")}));
  EXPECT_FALSE(t->add_bos());
  // Bytes map through GPT-2's table: space is "Ġ" (U+0120).
  EXPECT_EQ(t->encode(" "), (Ids{v.id("\xC4\xA0")}));
  EXPECT_EQ(t->piece(v.id("\xC4\xA0")), " ");
}

TEST(BpeRules, UnknownPreTokenizerFallsBackToDefault) {
  auto v = SyntheticVocab::bpe({"ab"}, {"a b"});
  v.writer.set("tokenizer.ggml.pre", gguf::Value::of_string("no-such-pre-tokenizer"));
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->pre(), "no-such-pre-tokenizer");
  EXPECT_EQ(t->encode("ab ab"), (Ids{v.id("ab"), v.id("\xC4\xA0"), v.id("ab")}));
}

TEST(BpeRules, Llama3DefaultsAndIgnoreMerges) {
  // With pre = llama-bpe a word that is a token is taken whole, without merges reaching it.
  auto v = SyntheticVocab::bpe({"abc"}, {});
  v.writer.set("tokenizer.ggml.pre", gguf::Value::of_string("llama-bpe"));
  v.writer.set("tokenizer.ggml.bos_token_id", gguf::Value::of_u32(0));
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_TRUE(t->add_bos());  // llama3 pre-tokenizers default to adding BOS
  EXPECT_EQ(t->encode("abc", kPlain), (Ids{v.id("abc")}));
}

TEST(BpeRules, InvalidUtf8IsKeptAsBytes) {
  auto v = SyntheticVocab::bpe({}, {});
  auto t = v.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  const std::string s = "a\xFF\xC3(b";
  const Ids ids = t->encode(s, kPlain);
  EXPECT_EQ(ids.size(), s.size());
  EXPECT_EQ(t->decode(ids), s);
}

}  // namespace
}  // namespace kvasir
