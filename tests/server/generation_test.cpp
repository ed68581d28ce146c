// check_text_length: rejecting text prompts that cannot fit the context before tokenizing them,
// with the error check_prompt gives after tokenizing.
#include <gtest/gtest.h>

#include <climits>

#include "server/generation.h"
#include "tokenizer/tokenizer_test_util.h"

namespace kvasir::server {
namespace {

TEST(CheckTextLength, RejectsOnlyWhatCannotFit) {
  // stories260K: SentencePiece, the longest token text is "▁friend" (9 bytes), context 2048 here.
  KV_REQUIRE_VOCAB(t, "stories260K");
  const int32_t ctx = 2048;
  const size_t per_token = size_t(t->max_piece_bytes());
  ASSERT_EQ(per_token, 9u);
  EXPECT_FALSE(check_text_length(0, *t, ctx, Endpoint::completions));
  EXPECT_FALSE(check_text_length(per_token * (ctx - 1), *t, ctx, Endpoint::completions));  // 2047 tokens might fit
  auto e = check_text_length(per_token * (ctx - 1) + 1, *t, ctx, Endpoint::completions);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->type, "invalid_request_error");
  EXPECT_EQ(e->code, "context_length_exceeded");
  EXPECT_EQ(e->param, "prompt");
  EXPECT_NE(e->message.find("2048"), std::string::npos) << e->message;
  auto chat = check_text_length(size_t(8) << 20, *t, ctx, Endpoint::chat);
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->param, "messages");
  EXPECT_TRUE(check_text_length(SIZE_MAX, *t, ctx, Endpoint::chat));  // no overflow
}

TEST(CheckTextLength, AgreesWithCheckPrompt) {
  // The densest text there is (the longest token, repeated) is rejected by both checks alike.
  KV_REQUIRE_VOCAB(t, "stories260K");
  const int32_t ctx = 64;
  std::string text;
  while (text.size() <= size_t(t->max_piece_bytes()) * (ctx - 1)) text += "\xE2\x96\x81" "friend";
  auto early = check_text_length(text.size(), *t, ctx, Endpoint::completions);
  ASSERT_TRUE(early);
  const auto ids = t->encode(text, {.add_special = false});
  auto late = check_prompt(ids, GenerationRequest{}, Endpoint::completions, *t, ctx);
  ASSERT_FALSE(late.ok()) << ids.size() << " tokens";
  EXPECT_EQ(late.error().status, early->status);
  EXPECT_EQ(late.error().code, early->code);
  EXPECT_EQ(late.error().param, early->param);
  EXPECT_EQ(late.error().type, early->type);
}

TEST(CheckTextLength, NoBoundNeverRejects) {
  // Phi-3's special tokens strip the whitespace after them: no bytes-per-token bound exists.
  KV_REQUIRE_VOCAB(t, "phi-3");
  ASSERT_EQ(t->max_piece_bytes(), INT32_MAX);
  EXPECT_FALSE(check_text_length(size_t(1) << 30, *t, 4096, Endpoint::chat));
}

}  // namespace
}  // namespace kvasir::server
