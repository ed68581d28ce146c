// Bad tokenizer metadata is refused with an error that names the problem.
#include <gtest/gtest.h>

#include "synthetic_vocab.h"

namespace kvasir {
namespace {

using test::SyntheticVocab;

void expect_error(Result<Tokenizer> t, const std::string& needle) {
  ASSERT_FALSE(t.ok()) << "expected an error mentioning '" << needle << "'";
  EXPECT_NE(t.error().find(needle), std::string::npos) << "error was: " << t.error();
}

TEST(VocabErrors, SyntheticVocabulariesLoad) {
  auto spm = SyntheticVocab::spm({"a", "b"});
  ASSERT_TRUE(spm.tokenizer().ok()) << spm.tokenizer().error();
  auto bpe = SyntheticVocab::bpe({"ab"}, {"a b"});
  ASSERT_TRUE(bpe.tokenizer().ok()) << bpe.tokenizer().error();
}

TEST(VocabErrors, MissingOrUnsupportedModel) {
  gguf::Writer w;
  auto bytes = w.to_bytes();
  auto f = gguf::parse(bytes);
  ASSERT_TRUE(f.ok());
  expect_error(Tokenizer::from_gguf(*f), "missing tokenizer.ggml.model");

  auto v = SyntheticVocab::spm({});
  v.writer.set("tokenizer.ggml.model", gguf::Value::of_string("bert"));
  expect_error(v.tokenizer(), "'bert' is not supported");
  v.writer.set("tokenizer.ggml.model", gguf::Value::of_u32(1));
  expect_error(v.tokenizer(), "tokenizer.ggml.model must be a string");
}

TEST(VocabErrors, TokenList) {
  auto v = SyntheticVocab::spm({});
  expect_error(v.tokenizer("tokens"), "missing tokenizer.ggml.tokens");

  auto dup = SyntheticVocab::spm({"x", "x"});
  expect_error(dup.tokenizer(), "duplicate token");

  auto wrong = SyntheticVocab::spm({});
  wrong.writer.set("tokenizer.ggml.tokens", gguf::Value::of_array(gguf::ValueType::U32, {gguf::Value::of_u32(1)}));
  expect_error(wrong.tokenizer("tokens"), "tokenizer.ggml.tokens must be an array of strings");
}

TEST(VocabErrors, ArrayLengthsMustMatch) {
  auto v = SyntheticVocab::spm({"a"});
  v.scores.pop_back();
  expect_error(v.tokenizer(), "tokenizer.ggml.scores has");

  auto t = SyntheticVocab::spm({"a"});
  t.types.push_back(1);
  expect_error(t.tokenizer(), "tokenizer.ggml.token_type has");
}

TEST(VocabErrors, TokenTypeOutOfRange) {
  auto v = SyntheticVocab::spm({"a"});
  v.types.back() = 9;
  expect_error(v.tokenizer(), "is not a token type");
}

TEST(VocabErrors, SpecialIdsInRange) {
  auto v = SyntheticVocab::spm({"a"});
  v.writer.set("tokenizer.ggml.bos_token_id", gguf::Value::of_u32(100000));
  expect_error(v.tokenizer(), "tokenizer.ggml.bos_token_id = 100000 is out of range");

  // 0xFFFFFFFF is what converters write for "none" (stories260K's padding id).
  auto none = SyntheticVocab::spm({"a"});
  none.writer.set("tokenizer.ggml.padding_token_id", gguf::Value::of_u32(0xFFFFFFFFu));
  auto t = none.tokenizer();
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->pad(), -1);

  auto eos = SyntheticVocab::spm({"a"});
  eos.writer.set("tokenizer.ggml.eos_token_id", gguf::Value::of_f32(2));
  expect_error(eos.tokenizer(), "tokenizer.ggml.eos_token_id must be an integer");
}

TEST(VocabErrors, AddBosNeedsBos) {
  auto v = SyntheticVocab::bpe({}, {});
  v.writer.set("tokenizer.ggml.add_bos_token", gguf::Value::of_bool(true));
  // BPE's default BOS is id 11, which this vocabulary has; take it away.
  v.writer.set("tokenizer.ggml.bos_token_id", gguf::Value::of_i32(-1));
  expect_error(v.tokenizer(), "add_bos_token is true but there is no BOS token");

  auto w = SyntheticVocab::spm({});
  w.writer.set("tokenizer.ggml.add_bos_token", gguf::Value::of_u32(1));
  expect_error(w.tokenizer(), "tokenizer.ggml.add_bos_token must be a bool");
}

TEST(VocabErrors, Merges) {
  auto v = SyntheticVocab::bpe({"ab"}, {"a b"});
  v.writer.set("tokenizer.ggml.merges", gguf::Value::of_array(gguf::ValueType::STRING, {gguf::Value::of_string("ab")}));
  expect_error(v.tokenizer(), "tokenizer.ggml.merges[0] = 'ab' is not two tokens");

  auto missing = SyntheticVocab::bpe({}, {});
  gguf::Writer w;
  w.set("tokenizer.ggml.model", gguf::Value::of_string("gpt2"));
  std::vector<gguf::Value> toks;
  for (const auto& t : missing.tokens) toks.push_back(gguf::Value::of_string(t));
  w.set("tokenizer.ggml.tokens", gguf::Value::of_array(gguf::ValueType::STRING, toks));
  auto bytes = w.to_bytes();
  auto f = gguf::parse(bytes);
  ASSERT_TRUE(f.ok());
  expect_error(Tokenizer::from_gguf(*f), "missing tokenizer.ggml.merges");
}

TEST(VocabErrors, ByteTokenText) {
  auto v = SyntheticVocab::spm({"<0xZZ>"});
  v.types.back() = 6;
  expect_error(v.tokenizer(), "has type byte but its text '<0xZZ>' is not <0xNN>");
}

}  // namespace
}  // namespace kvasir
