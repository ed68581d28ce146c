// Response objects, chat prompt assembly and prompt checks, on the real stories260K vocabulary.
#include <gtest/gtest.h>

#include <cmath>

#include "format/mapped_file.h"
#include "chat/chat_format.h"
#include "server/generation.h"
#include "server/responses.h"

namespace kvasir::server {
namespace {

using json = nlohmann::ordered_json;

const Tokenizer& stories_tokenizer() {
  static const Tokenizer tok = [] {
    auto file = MappedFile::open(std::string(KVASIR_SHARED_DIR) + "/models/stories260K.gguf");
    if (!file) throw std::runtime_error(file.error());
    auto g = gguf::parse(file->bytes());
    if (!g) throw std::runtime_error(g.error());
    auto t = Tokenizer::from_gguf(*g);
    if (!t) throw std::runtime_error(t.error());
    return *t;
  }();
  return tok;
}

TEST(Responses, UsageAndFinishReasons) {
  EXPECT_EQ(dump_json(usage_json({.prompt_tokens = 5, .completion_tokens = 7, .cached_tokens = 4})),
            R"({"prompt_tokens":5,"completion_tokens":7,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":4}})");
  EXPECT_TRUE(finish_reason_json(engine::FinishReason::None).is_null());
  EXPECT_EQ(finish_reason_json(engine::FinishReason::Stop), "stop");
  EXPECT_EQ(finish_reason_json(engine::FinishReason::StopString), "stop");
  EXPECT_EQ(finish_reason_json(engine::FinishReason::Length), "length");
  EXPECT_EQ(finish_reason_json(engine::FinishReason::Abort), "abort");
}

TEST(Responses, MetaIdsAreFreshAndPrefixed) {
  const ResponseMeta a = make_meta(Endpoint::chat, "m"), b = make_meta(Endpoint::chat, "m");
  EXPECT_EQ(a.id.rfind("chatcmpl-", 0), 0u);
  EXPECT_NE(a.id, b.id);
  EXPECT_EQ(make_meta(Endpoint::completions, "m").id.rfind("cmpl-", 0), 0u);
}

TEST(Responses, ChatChunks) {
  const ResponseMeta meta{.endpoint = Endpoint::chat, .id = "chatcmpl-x", .created = 7, .model = "m"};
  EXPECT_EQ(dump_json(stream_chunk(meta, {.index = 0, .first = true})),
            R"({"id":"chatcmpl-x","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(dump_json(stream_chunk(meta, {.index = 1, .text = "hi", .with_usage_field = true})),
            R"({"id":"chatcmpl-x","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}],"usage":null})");
  EXPECT_EQ(dump_json(stream_chunk(meta, {.index = 0, .finish = engine::FinishReason::Length})),
            R"({"id":"chatcmpl-x","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}]})");
  EXPECT_EQ(dump_json(usage_chunk(meta, {.prompt_tokens = 1, .completion_tokens = 2})),
            R"({"id":"chatcmpl-x","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(Responses, CompletionLogprobs) {
  const Tokenizer& tok = stories_tokenizer();
  const std::vector<int32_t> ids = tok.encode("Once upon", {.add_special = false});
  ASSERT_GE(ids.size(), 2u);
  std::vector<engine::TokenLogprob> lps = {{.token = ids[0], .logprob = -0.5f, .top = {{ids[0], -0.5f}, {ids[1], -1.5f}}},
                                           {.token = ids[1], .logprob = -INFINITY, .top = {}}};
  int64_t offset = 3;
  const json j = completion_logprobs_json(tok, lps, offset);
  EXPECT_EQ(j["tokens"][0], tok.piece(ids[0]));
  EXPECT_EQ(j["token_logprobs"][0], -0.5);
  EXPECT_EQ(j["token_logprobs"][1], -9999.0);  // JSON has no -inf
  EXPECT_EQ(j["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(j["top_logprobs"][0][tok.piece(ids[1])], -1.5);
  EXPECT_EQ(j["text_offset"][0], 3);
  EXPECT_EQ(j["text_offset"][1], 3 + int64_t(tok.piece(ids[0]).size()));
  EXPECT_EQ(offset, 3 + int64_t(tok.piece(ids[0]).size() + tok.piece(ids[1]).size()));

  const json c = chat_logprobs_json(tok, lps, /*with_top=*/true);
  ASSERT_EQ(c["content"].size(), 2u);
  EXPECT_EQ(c["content"][0]["token"], tok.piece(ids[0]));
  EXPECT_EQ(c["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(c["content"][0]["bytes"].size(), tok.piece(ids[0]).size());
  EXPECT_EQ(chat_logprobs_json(tok, lps, false)["content"][0]["top_logprobs"].size(), 0u);
}

TEST(Responses, FullChatResponse) {
  const ResponseMeta meta{.endpoint = Endpoint::chat, .id = "chatcmpl-y", .created = 1, .model = "m"};
  std::vector<ChoiceOutput> choices = {{.index = 0, .text = "Hello", .finish = engine::FinishReason::StopString},
                                       {.index = 1, .text = "Hi", .finish = engine::FinishReason::Length}};
  const json j = full_response(meta, stories_tokenizer(), choices, {.prompt_tokens = 3, .completion_tokens = 4}, false, -1);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
}

TEST(ChatFormat, AddsBosOnlyWhenTheTemplateDidNot) {
  const Tokenizer& tok = stories_tokenizer();
  ASSERT_GE(tok.bos(), 0);
  const std::string bos = tok.token_text(tok.bos());
  const json messages = json::array({json{{"role", "user"}, {"content", "Hello"}}});
  chat::ChatFormatter with_bos("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", bos, "");
  auto text = with_bos.render(messages, {});
  ASSERT_TRUE(text.ok()) << text.error();
  EXPECT_EQ(*text, bos + "Hello");
  auto ids = with_bos.tokenize(tok, *text);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], tok.bos());
  EXPECT_NE(ids[1], tok.bos());  // one BOS, not two

  chat::ChatFormatter without("{% for m in messages %}{{ m.content }}{% endfor %}", bos, "");
  auto ids2 = without.tokenize(tok, *without.render(messages, {}));
  EXPECT_EQ(ids2, ids);  // the vocabulary asks for BOS, so it is added once
}

TEST(ChatFormat, GenerationPromptKwargsAndErrors) {
  chat::ChatFormatter f("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt %}<assistant>{% endif %}{% if shout %}!{% endif %}",
                  "<s>", "</s>");
  const json messages = json::array({json{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_EQ(*f.render(messages, {}), "<user>Hi<assistant>");
  EXPECT_EQ(*f.render(messages, {.add_generation_prompt = false}), "<user>Hi");
  EXPECT_EQ(*f.render(messages, {.extra = json{{"shout", true}}}), "<user>Hi<assistant>!");
  // Request kwargs cannot replace the conversation.
  EXPECT_EQ(*f.render(messages, {.extra = json{{"messages", json::array()}}}), "<user>Hi<assistant>");

  chat::ChatFormatter closing("{% for m in messages %}<{{ m.role }}>{{ m.content }}</turn>{% endfor %}", "", "");
  const json prefill = json::array({json{{"role", "user"}, {"content", "Hi"}}, json{{"role", "assistant"}, {"content", "Sure,"}}});
  EXPECT_EQ(*closing.render(prefill, {.add_generation_prompt = false, .continue_final_message = true}),
            "<user>Hi</turn><assistant>Sure,");

  chat::ChatFormatter raising("{{ raise_exception('roles must alternate') }}", "", "");
  auto err = raising.render(messages, {});
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.error().find("roles must alternate"), std::string::npos);
}

TEST(Generation, PromptChecks) {
  const Tokenizer& tok = stories_tokenizer();
  GenerationRequest r;
  // Default max_tokens: 16 for completions (as OpenAI), the rest of the context for chat.
  EXPECT_EQ(*check_prompt({1, 2, 3}, r, Endpoint::completions, tok, 100), 16);
  EXPECT_EQ(*check_prompt({1, 2, 3}, r, Endpoint::chat, tok, 100), 97);
  EXPECT_EQ(*check_prompt({1, 2, 3}, r, Endpoint::completions, tok, 10), 7);

  auto full = check_prompt(std::vector<int32_t>(100, 5), r, Endpoint::completions, tok, 100);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.error().status, 400);
  EXPECT_EQ(full.error().code, "context_length_exceeded");
  EXPECT_EQ(full.error().param, "prompt");

  r.max_tokens = 98;
  auto over = check_prompt({1, 2, 3}, r, Endpoint::chat, tok, 100);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code, "context_length_exceeded");
  EXPECT_EQ(over.error().param, "max_tokens");
  r.max_tokens = 97;
  EXPECT_EQ(*check_prompt({1, 2, 3}, r, Endpoint::chat, tok, 100), 97);

  auto empty = check_prompt({}, r, Endpoint::completions, tok, 100);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.error().param, "prompt");
  auto bad_id = check_prompt({1, tok.n_vocab()}, r, Endpoint::completions, tok, 100);
  ASSERT_FALSE(bad_id.ok());
  EXPECT_EQ(bad_id.error().status, 400);

  GenerationRequest bias;
  bias.logit_bias = {{tok.n_vocab(), 1.0f}};
  ASSERT_TRUE(check_request_ids(bias, tok).has_value());
  EXPECT_EQ(check_request_ids(bias, tok)->param, "logit_bias");
}

TEST(Generation, EngineParamsSeedPerChoice) {
  GenerationRequest r;
  r.sampling.temperature = 0.5f;
  r.stop = {"x"};
  r.min_tokens = 50;
  r.top_logprobs = 2;
  const auto p = engine_params(r, {1, 2}, 10, 100, 3);
  EXPECT_EQ(p.sampling.seed, 103u);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.5f);
  EXPECT_EQ(p.stop.max_tokens, 10);
  EXPECT_EQ(p.stop.min_tokens, 10);  // never above max_tokens
  EXPECT_EQ(p.stop.stop_strings, (std::vector<std::string>{"x"}));
  EXPECT_EQ(p.top_logprobs, 2);
  EXPECT_EQ(p.prompt, (std::vector<int32_t>{1, 2}));
}

}  // namespace
}  // namespace kvasir::server
