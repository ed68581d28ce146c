// Facts about the real vocabularies: special ids, end-of-generation, special-token parsing,
// pieces, and llama.cpp's detokenized generations for stories260K.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace kvasir {
namespace {

using Ids = std::vector<int32_t>;

TEST(RealVocab, Llama3SpecialTokens) {
  KV_REQUIRE_VOCAB(t, "llama-bpe");
  EXPECT_EQ(t->kind(), TokenizerKind::bpe);
  EXPECT_EQ(t->n_vocab(), 128256);
  EXPECT_EQ(t->bos(), 128000);
  EXPECT_EQ(t->eos(), 128001);
  EXPECT_TRUE(t->add_bos());
  EXPECT_TRUE(t->is_eog(128001));
  EXPECT_TRUE(t->is_eog(t->token_to_id("<|eot_id|>")));
  EXPECT_FALSE(t->is_eog(t->token_to_id("<|start_header_id|>")));
  EXPECT_FALSE(t->is_eog(9906));

  const std::string text = "<|start_header_id|>user<|end_header_id|>Hi";
  const Ids parsed = t->encode(text, {.add_special = false, .parse_special = true});
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed[0], t->token_to_id("<|start_header_id|>"));
  const Ids plain = t->encode(text, {.add_special = false, .parse_special = false});
  for (int32_t id : plain) EXPECT_LT(id, 128000) << "special token parsed with parse_special=false";
  EXPECT_EQ(t->decode(plain), text);
  EXPECT_EQ(t->decode(parsed), text);
  EXPECT_EQ(t->decode(parsed, /*skip_special=*/true), "userHi");
  EXPECT_EQ(t->piece(9906), "Hello");
  EXPECT_EQ(t->token_text(1917), "\xC4\xA0world");
  EXPECT_EQ(t->piece(1917), " world");
}

TEST(RealVocab, SpmSpaceSymbolDecodesAsSpace) {
  // SentencePiece cannot tell a literal U+2581 from an escaped space (nor can llama.cpp).
  KV_REQUIRE_VOCAB(t, "llama-spm");
  EXPECT_EQ(t->encode("a\xE2\x96\x81" "b", {.add_special = false}), t->encode("a b", {.add_special = false}));
}

TEST(RealVocab, QwenUserDefinedTokensAlwaysMatch) {
  KV_REQUIRE_VOCAB(t, "qwen2");
  EXPECT_FALSE(t->add_bos());
  EXPECT_TRUE(t->is_eog(t->token_to_id("<|im_end|>")));
  EXPECT_TRUE(t->is_eog(t->token_to_id("<|endoftext|>")));
  const int32_t pad = t->token_to_id("[PAD151646]");
  ASSERT_GE(pad, 0);
  EXPECT_EQ(t->encode("[PAD151646]", {.add_special = false, .parse_special = false}), Ids{pad});
  const int32_t im_start = t->token_to_id("<|im_start|>");
  EXPECT_EQ(t->encode("<|im_start|>", {.add_special = false, .parse_special = true}), Ids{im_start});
  EXPECT_NE(t->encode("<|im_start|>", {.add_special = false, .parse_special = false}), Ids{im_start});
}

TEST(RealVocab, LlamaSpm) {
  KV_REQUIRE_VOCAB(t, "llama-spm");
  EXPECT_EQ(t->kind(), TokenizerKind::spm);
  EXPECT_EQ(t->bos(), 1);
  EXPECT_EQ(t->eos(), 2);
  EXPECT_EQ(t->unk(), 0);
  EXPECT_TRUE(t->add_bos());
  EXPECT_FALSE(t->add_eos());
  EXPECT_TRUE(t->add_space_prefix());
  EXPECT_EQ(t->encode("Hello world"), (Ids{1, 15043, 3186}));
  EXPECT_EQ(t->decode(Ids{1, 15043, 3186}, true), "Hello world");
  EXPECT_EQ(t->decode(Ids{1, 15043, 3186}, false), "<s>Hello world");
  EXPECT_EQ(t->piece(15043), " Hello");
  EXPECT_EQ(t->encode("<s>", {.add_special = false, .parse_special = true}), Ids{1});
  EXPECT_NE(t->encode("<s>", {.add_special = false, .parse_special = false}), Ids{1});
  // Byte fallback: U+1F999 is four byte tokens that only decode together.
  const Ids llama = t->encode("\xF0\x9F\xA6\x99", {.add_special = false});
  EXPECT_EQ(llama.size(), 5u);  // "▁" + four bytes
  EXPECT_EQ(t->decode(llama), "\xF0\x9F\xA6\x99");
  StreamDecoder d(*t, true);
  std::string streamed;
  for (int32_t id : llama) streamed += d.push(id);
  EXPECT_EQ(streamed + d.flush(), "\xF0\x9F\xA6\x99");
}

TEST(RealVocab, StreamReplacesInvalidBytes) {
  KV_REQUIRE_VOCAB(t, "llama-spm");
  // <0xE6> <0x97> then "A": the incomplete character can never finish.
  const int32_t e6 = t->token_to_id("<0xE6>"), x97 = t->token_to_id("<0x97>"), a = t->token_to_id("A");
  StreamDecoder d(*t, false);
  EXPECT_EQ(d.push(e6), "");
  EXPECT_EQ(d.push(x97), "");
  EXPECT_EQ(d.push(a), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(d.push(e6), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
}

TEST(RealVocab, Phi3) {
  KV_REQUIRE_VOCAB(t, "phi-3");
  EXPECT_EQ(t->eos(), 32000);
  EXPECT_TRUE(t->is_eog(32000));
  EXPECT_TRUE(t->is_eog(t->token_to_id("<|end|>")));
  EXPECT_FALSE(t->is_eog(t->token_to_id("<|user|>")));
}

TEST(RealVocab, GemmaIfInstalled) {
  const Tokenizer* t = test::load_tokenizer_file(KVASIR_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf");
  if (!t) GTEST_SKIP() << "Gemma 3 model not installed";
  EXPECT_EQ(t->kind(), TokenizerKind::spm);
  EXPECT_EQ(t->n_vocab(), 262144);
  EXPECT_EQ(t->bos(), 2);
  EXPECT_EQ(t->eos(), 1);
  EXPECT_FALSE(t->add_space_prefix());
  EXPECT_TRUE(t->is_eog(1));
  EXPECT_TRUE(t->is_eog(t->token_to_id("<end_of_turn>")));
  EXPECT_FALSE(t->is_eog(t->token_to_id("<start_of_turn>")));
  const Ids ids = t->encode("<start_of_turn>user\nHello world<end_of_turn>\n");
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], t->token_to_id("<start_of_turn>"));
  EXPECT_EQ(t->decode(ids, false), "<bos><start_of_turn>user\nHello world<end_of_turn>\n");
  // No space prefix: "Hello" at the start is the bare word.
  EXPECT_EQ(t->encode("Hello", {.add_special = false}), Ids{t->token_to_id("Hello")});
  EXPECT_EQ(t->encode(" Hello", {.add_special = false}), Ids{t->token_to_id("\xE2\x96\x81Hello")});
  for (const char* s : {"Hello world", "  two  spaces\n\n\ttab", "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\xA6\x99"})
    EXPECT_EQ(t->decode(t->encode(s, {.add_special = true, .parse_special = false}), true), s);
}

// llama.cpp's own detokenization of stories260K generations (../shared/golden/models).
TEST(RealVocab, StoriesGenerationsDetokenizeLikeLlamaCpp) {
  std::ifstream in(test::shared_dir() + "/golden/models/stories260K.text.json");
  if (!in) GTEST_SKIP() << "golden generations not available";
  KV_REQUIRE_VOCAB(t, "stories260K");
  const auto doc = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& c : doc.at("cases")) {
    const std::string prompt = c.at("prompt").get<std::string>();
    const auto prompt_ids = c.at("prompt_ids").get<Ids>();
    EXPECT_EQ(t->encode(prompt, {.add_special = true, .parse_special = false}), prompt_ids) << prompt;
    if (c.at("greedy_text").is_null()) continue;
    const auto greedy = c.at("greedy_ids").get<Ids>();
    StreamDecoder d(*t, true, /*continuation=*/true);
    std::string text;
    for (int32_t id : greedy) text += d.push(id);
    text += d.flush();
    EXPECT_EQ(text, c.at("greedy_text").get<std::string>());
    Ids all = prompt_ids;
    all.insert(all.end(), greedy.begin(), greedy.end());
    EXPECT_EQ(t->decode(all, true), prompt + c.at("greedy_text").get<std::string>());
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace kvasir
