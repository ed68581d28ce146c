// Request parsing and validation: exact status codes, error fields and defaults.
#include <gtest/gtest.h>

#include <chrono>

#include "server/protocol.h"

namespace kvasir::server {
namespace {

using json = nlohmann::ordered_json;

// Parses a completion body that must fail; returns its error.
ApiError completion_error(const std::string& body) {
  auto r = parse_completion_request(body);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? ApiError{} : r.error();
}

ApiError chat_error(const std::string& body) {
  auto r = parse_chat_request(body);
  EXPECT_FALSE(r.ok()) << body;
  return r.ok() ? ApiError{} : r.error();
}

TEST(Protocol, ErrorBodyHasOpenAIShape) {
  const ApiError e = bad_request("'max_tokens' must be an integer", "max_tokens");
  EXPECT_EQ(error_body(e),
            R"({"error":{"message":"'max_tokens' must be an integer","type":"invalid_request_error","param":"max_tokens","code":null}})");
  ApiError ctx = bad_request("too long", "prompt", "context_length_exceeded");
  EXPECT_EQ(error_json(ctx)["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(ctx.status, 400);
}

TEST(Protocol, CompletionDefaults) {
  auto r = parse_completion_request(R"({"model": "m", "prompt": "Once upon a time"})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->gen.model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_FALSE(r->prompts[0].is_ids);
  EXPECT_EQ(r->prompts[0].text, "Once upon a time");
  EXPECT_FALSE(r->gen.max_tokens.has_value());
  EXPECT_EQ(r->gen.n, 1);
  EXPECT_FLOAT_EQ(r->gen.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r->gen.sampling.top_p, 1.0f);
  EXPECT_EQ(r->gen.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r->gen.sampling.min_p, 0.0f);
  EXPECT_FALSE(r->gen.sampling.seed.has_value());
  EXPECT_EQ(r->gen.top_logprobs, -1);
  EXPECT_FALSE(r->gen.stream);
  EXPECT_FALSE(r->echo);
}

TEST(Protocol, CompletionAllFields) {
  auto r = parse_completion_request(R"({
    "prompt": [1, 2, 3], "max_tokens": 7, "min_tokens": 2, "temperature": 0, "top_p": 0.5, "top_k": -1,
    "min_p": 0.1, "presence_penalty": -2, "frequency_penalty": 1.5, "repetition_penalty": 1.1, "seed": 42,
    "stop": ["\n", "", "END"], "stop_token_ids": [9], "n": 3, "stream": true, "stream_options": {"include_usage": true},
    "logprobs": 5, "logit_bias": {"17": -100, "3": 2.5}, "ignore_eos": true, "cache_salt": "t1", "user": "u",
    "priority": -3, "echo": true})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(r->prompts[0].is_ids);
  EXPECT_EQ(r->prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(*r->gen.max_tokens, 7);
  EXPECT_EQ(r->gen.min_tokens, 2);
  EXPECT_FLOAT_EQ(r->gen.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(r->gen.sampling.top_p, 0.5f);
  EXPECT_EQ(r->gen.sampling.top_k, 0);  // -1 means off
  EXPECT_FLOAT_EQ(r->gen.sampling.presence_penalty, -2.0f);
  EXPECT_EQ(*r->gen.sampling.seed, 42u);
  EXPECT_EQ(r->gen.stop, (std::vector<std::string>{"\n", "END"}));  // empty strings dropped
  EXPECT_EQ(r->gen.stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(r->gen.n, 3);
  EXPECT_TRUE(r->gen.stream);
  EXPECT_TRUE(r->gen.include_usage);
  EXPECT_EQ(r->gen.top_logprobs, 5);
  ASSERT_EQ(r->gen.logit_bias.size(), 2u);
  EXPECT_EQ(r->gen.logit_bias[0], (std::pair<int32_t, float>{17, -100.0f}));
  EXPECT_TRUE(r->gen.ignore_eos);
  EXPECT_EQ(r->gen.cache_salt, "t1");
  EXPECT_EQ(r->gen.priority, -3);
  EXPECT_TRUE(r->echo);
}

TEST(Protocol, PromptShapes) {
  auto batch = parse_completion_request(R"({"prompt": ["a", "b"], "n": 2})");
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->prompts.size(), 2u);
  auto ids = parse_completion_request(R"({"prompt": [[1, 2], [3]]})");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->prompts.size(), 2u);
  EXPECT_EQ(ids->prompts[1].ids, (std::vector<int32_t>{3}));
  EXPECT_EQ(completion_error(R"({"prompt": []})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": 5})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [1, "a"]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [1, -2]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [1.5]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": [{"x": 1}]})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"max_tokens": 5})").param, "prompt");
  // 33 prompts x n = 2 is more choices than one request may ask for.
  std::string many = R"({"n": 2, "prompt": [)";
  for (int i = 0; i < 33; ++i) many += std::string(i ? "," : "") + "\"p\"";
  EXPECT_EQ(completion_error(many + "]}").param, "n");
}

TEST(Protocol, MalformedBodies) {
  for (const char* body : {"", "{", "not json", R"({"prompt": "a",})", "[1, 2]", "\"text\"", "null", "{\"prompt\": \"\xff\"}"}) {
    const ApiError e = completion_error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.code, "invalid_json") << body;
  }
}

TEST(Protocol, WrongTypesAndRanges) {
  struct Case {
    const char* fields;
    const char* param;
  };
  const Case cases[] = {
      {R"("max_tokens": "10")", "max_tokens"},   {R"("max_tokens": 10.0)", "max_tokens"},
      {R"("max_tokens": true)", "max_tokens"},   {R"("max_tokens": 0)", "max_tokens"},
      {R"("max_tokens": -1)", "max_tokens"},     {R"("max_tokens": 99999999999)", "max_tokens"},
      {R"("max_tokens": 18446744073709551615)", "max_tokens"},
      {R"("max_completion_tokens": "x")", "max_completion_tokens"},
      {R"("temperature": "hot")", "temperature"}, {R"("temperature": 2.5)", "temperature"},
      {R"("temperature": -0.1)", "temperature"},  {R"("top_p": 0)", "top_p"},
      {R"("top_p": 1.01)", "top_p"},              {R"("top_k": -2)", "top_k"},
      {R"("top_k": 1.5)", "top_k"},               {R"("min_p": 2)", "min_p"},
      {R"("presence_penalty": 3)", "presence_penalty"}, {R"("frequency_penalty": -2.5)", "frequency_penalty"},
      {R"("repetition_penalty": 0)", "repetition_penalty"}, {R"("seed": "7")", "seed"},
      {R"("seed": 1.5)", "seed"},                 {R"("n": 0)", "n"},
      {R"("n": 65)", "n"},                        {R"("n": "2")", "n"},
      {R"("stop": 5)", "stop"},                   {R"("stop": [1])", "stop"},
      {R"("stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"])", "stop"},
      {R"("stop_token_ids": [-1])", "stop_token_ids"}, {R"("stop_token_ids": 3)", "stop_token_ids"},
      {R"("stream": "yes")", "stream"},           {R"("stream_options": {"include_usage": true})", "stream_options"},
      {R"("stream": true, "stream_options": {"include_usage": 1})", "stream_options.include_usage"},
      {R"("stream": true, "stream_options": 1)", "stream_options"},
      {R"("logprobs": 21)", "logprobs"},          {R"("logprobs": true)", "logprobs"},
      {R"("logit_bias": [1])", "logit_bias"},     {R"("logit_bias": {"abc": 1})", "logit_bias"},
      {R"("logit_bias": {"-1": 1})", "logit_bias"}, {R"("logit_bias": {"5": 101})", "logit_bias"},
      {R"("logit_bias": {"5": "1"})", "logit_bias"}, {R"("ignore_eos": 1)", "ignore_eos"},
      {R"("min_tokens": -1)", "min_tokens"},      {R"("max_tokens": 4, "min_tokens": 5)", "min_tokens"},
      {R"("cache_salt": 5)", "cache_salt"},       {R"("user": ["x"])", "user"},
      {R"("model": 3)", "model"},                 {R"("echo": "true")", "echo"},
  };
  for (const Case& c : cases) {
    const std::string body = std::string(R"({"prompt": "hi", )") + c.fields + "}";
    const ApiError e = completion_error(body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.type, "invalid_request_error") << body;
    EXPECT_EQ(e.param, c.param) << body << " -> " << e.message;
    EXPECT_FALSE(e.message.empty());
    EXPECT_EQ(e.code, "") << body;
  }
}

TEST(Protocol, NullMeansAbsentAndSeedsWrap) {
  auto r = parse_completion_request(
      R"({"prompt": "hi", "max_tokens": null, "temperature": null, "stop": null, "seed": -1, "logit_bias": null})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_FALSE(r->gen.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r->gen.sampling.temperature, 1.0f);
  EXPECT_EQ(*r->gen.sampling.seed, ~uint64_t(0));
  auto alias = parse_completion_request(R"({"prompt": "hi", "max_completion_tokens": 9})");
  ASSERT_TRUE(alias.ok());
  EXPECT_EQ(*alias->gen.max_tokens, 9);
  auto one_stop = parse_completion_request(R"({"prompt": "hi", "stop": "\n\n"})");
  ASSERT_TRUE(one_stop.ok());
  EXPECT_EQ(one_stop->gen.stop, (std::vector<std::string>{"\n\n"}));
}

TEST(Protocol, ChatMessages) {
  auto r = parse_chat_request(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null},
      {"role": "assistant", "content": null, "tool_calls": []}],
    "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 3})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[1]["content"], "a\nb");
  EXPECT_EQ(r->messages[2]["content"], "");
  EXPECT_TRUE(r->messages[3]["content"].is_null());
  EXPECT_EQ(*r->gen.max_tokens, 5);
  EXPECT_EQ(r->gen.top_logprobs, 3);
  EXPECT_TRUE(r->add_generation_prompt);
  EXPECT_TRUE(r->tools.is_null());

  auto plain = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->gen.top_logprobs, 0);
  auto none = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->gen.top_logprobs, -1);
}

TEST(Protocol, ChatErrors) {
  EXPECT_EQ(chat_error(R"({"model": "m"})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages": "hi"})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages": []})").param, "messages");
  EXPECT_EQ(chat_error(R"({"messages": [5]})").param, "messages[0]");
  EXPECT_EQ(chat_error(R"({"messages": [{"content": "x"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": 1, "content": "x"}]})").param, "messages[0].role");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": 5}]})").param, "messages[0].content");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})").param,
            "messages[0].content[0].type");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})").param,
            "messages[0].content[0].text");
  const std::string msg = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(chat_error("{" + msg + R"(, "top_logprobs": 2})").param, "top_logprobs");
  EXPECT_EQ(chat_error("{" + msg + R"(, "logprobs": 3})").param, "logprobs");
  EXPECT_EQ(chat_error("{" + msg + R"(, "logprobs": true, "top_logprobs": 21})").param, "top_logprobs");
  EXPECT_EQ(chat_error("{" + msg + R"(, "tools": {}})").param, "tools");
  EXPECT_EQ(chat_error("{" + msg + R"(, "chat_template_kwargs": []})").param, "chat_template_kwargs");
  EXPECT_EQ(chat_error("{" + msg + R"(, "response_format": {"type": "xml"}})").param, "response_format.type");
  EXPECT_EQ(chat_error("{" + msg + R"(, "continue_final_message": true})").param, "continue_final_message");
  EXPECT_EQ(chat_error("{" + msg + R"(, "temperature": "0"})").param, "temperature");
}

TEST(Protocol, TokenizeAndDetokenize) {
  auto t = parse_tokenize_request(R"({"prompt": "hello", "add_special_tokens": false, "return_token_strs": true})");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->is_chat);
  EXPECT_EQ(t->prompt, "hello");
  EXPECT_FALSE(t->add_special_tokens);
  EXPECT_TRUE(t->return_token_strs);
  auto c = parse_tokenize_request(R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->is_chat);
  EXPECT_FALSE(c->add_special_tokens);  // the template carries them
  EXPECT_EQ(parse_tokenize_request(R"({"model": "m"})").error().param, "prompt");
  EXPECT_EQ(parse_tokenize_request(R"({"prompt": 5})").error().param, "prompt");

  auto d = parse_detokenize_request(R"({"tokens": [1, 2, 300]})");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens, (std::vector<int32_t>{1, 2, 300}));
  EXPECT_EQ(parse_detokenize_request(R"({})").error().param, "tokens");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": "1 2"})").error().param, "tokens");
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": [1, "2"]})").error().param, "tokens");
  EXPECT_EQ(parse_detokenize_request("{").error().code, "invalid_json");
}

// `depth` arrays nested in each other around `inner`: [[...inner...]].
std::string nested(size_t depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(Protocol, JsonNestingDepth) {
  EXPECT_EQ(json_nesting_depth("1"), 0u);
  EXPECT_EQ(json_nesting_depth("{}"), 1u);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}], "c": {}})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[{{{"})"), 1u);
  // An escaped quote does not end the string; an escaped backslash before a quote does.
  EXPECT_EQ(json_nesting_depth(R"({"a": "\"[[[", "b": "\\", "c": [[]]})"), 3u);
  EXPECT_EQ(json_nesting_depth(R"({"a": "\\\"[[", "b": "\u005b"})"), 1u);
  EXPECT_EQ(json_nesting_depth("]]]{"), 1u);  // stray closers do not go below zero
  EXPECT_EQ(json_nesting_depth(nested(100000), 65), 65u);  // stops once it is that deep
  EXPECT_EQ(json_nesting_depth(nested(100000)), 100000u);
}

TEST(Protocol, JsonMaxObjectMembers) {
  EXPECT_EQ(json_max_object_members("{}"), 0u);
  EXPECT_EQ(json_max_object_members(R"({"a": 1, "b": 2, "c": {"x": 1, "y": 2, "z": 3, "w": 4}})"), 4u);
  EXPECT_EQ(json_max_object_members(R"({"a": [1, 2, 3, 4, 5, 6], "b": "x,y,z,\",w"})"), 2u);  // arrays and strings
  EXPECT_EQ(json_max_object_members(R"({"a": {"x": 1, "y": 2}, "b": 1})"), 2u);  // the inner commas are the inner's
}

// Hardening II: an object's keys are found by a linear search while it is parsed, so 100,000
// keys (a $defs chain of aliases) cost the parser tens of seconds. Refused before parsing.
TEST(Protocol, ObjectsWithTooManyMembersAreRejectedBeforeParsing) {
  auto object = [](size_t n) {
    std::string s = "{";
    for (size_t i = 0; i < n; ++i) s += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":1";
    return s + "}";
  };
  const std::string huge = R"({"prompt": "x", "x": )" + object(100000) + "}";
  const auto t0 = std::chrono::steady_clock::now();
  auto r = parse_completion_request(huge);
  // Parsing it costs tens of seconds; the scan a few milliseconds (1 s: room for a loaded sanitizer build).
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, "json_object_too_large");
  EXPECT_NE(r.error().message.find(std::to_string(kMaxJsonObjectMembers)), std::string::npos);
  EXPECT_EQ(parse_json_object(object(kMaxJsonObjectMembers + 1)).error().code, "json_object_too_large");
  EXPECT_TRUE(parse_json_object(object(kMaxJsonObjectMembers)).ok());
  // An array of that many items is fine (appending costs nothing).
  std::string items = "[";
  for (size_t i = 0; i < 20000; ++i) items += i ? ",1" : "1";
  EXPECT_TRUE(parse_json_object(R"({"a": )" + items + "]}").ok());
}

TEST(Protocol, DeepJsonIsRejectedBeforeParsing) {
  // 110,000 levels in ~220 KB: copying, dumping or templating it would overflow the stack.
  const std::string deep = nested(110000);
  const std::string msg = R"("messages": [{"role": "user", "content": "x"}])";
  auto expect_too_deep = [](const auto& r, const std::string& what) {
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.error().status, 400) << what;
    EXPECT_EQ(r.error().type, "invalid_request_error") << what;
    EXPECT_EQ(r.error().code, "json_too_deep") << what;
    EXPECT_NE(r.error().message.find(std::to_string(kMaxJsonDepth)), std::string::npos) << r.error().message;
    EXPECT_FALSE(error_body(r.error()).empty());
  };
  expect_too_deep(parse_chat_request(R"({"messages": [{"role": "user", "content": )" + deep + "}]}"), "content");
  expect_too_deep(parse_chat_request(R"({"messages": )" + deep + "}"), "messages");
  expect_too_deep(parse_chat_request("{" + msg + R"(, "tools": )" + deep + "}"), "tools");
  expect_too_deep(parse_chat_request("{" + msg + R"(, "chat_template_kwargs": {"x": )" + deep + "}}"), "kwargs");
  expect_too_deep(parse_tokenize_request(R"({"messages": [{"role": "user", "content": )" + deep + "}]}"), "tokenize");
  expect_too_deep(parse_completion_request(R"({"prompt": )" + deep + "}"), "prompt");
  expect_too_deep(parse_detokenize_request(R"({"tokens": )" + deep + "}"), "tokens");
  // Deep objects as well as arrays; and a body that is deep but also broken JSON.
  std::string objects;
  for (int i = 0; i < 110000; ++i) objects += R"({"a":)";
  expect_too_deep(parse_chat_request("{" + msg + R"(, "chat_template_kwargs": )" + objects + "1"), "objects");
  expect_too_deep(parse_chat_request(deep), "not an object");
}

TEST(Protocol, DepthLimitIsExact) {
  // The body is level 1 and chat_template_kwargs level 2, so its "x" may nest kMaxJsonDepth - 2.
  const std::string msg = R"("messages": [{"role": "user", "content": "x"}])";
  auto body = [&](size_t depth) {
    return "{" + msg + R"(, "chat_template_kwargs": {"x": )" + nested(depth - 2) + "}}";
  };
  EXPECT_EQ(json_nesting_depth(body(kMaxJsonDepth)), kMaxJsonDepth);
  auto ok = parse_chat_request(body(kMaxJsonDepth));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->chat_template_kwargs["x"].dump(), nested(kMaxJsonDepth - 2));
  EXPECT_EQ(chat_error(body(kMaxJsonDepth + 1)).code, "json_too_deep");
  auto tok = parse_tokenize_request(R"({"prompt": "p", "x": )" + nested(kMaxJsonDepth - 1) + "}");
  EXPECT_TRUE(tok.ok());
  EXPECT_EQ(parse_tokenize_request(R"({"prompt": "p", "x": )" + nested(kMaxJsonDepth) + "}").error().code,
            "json_too_deep");
}

TEST(Protocol, BracketsInStringsDoNotCount) {
  // 100,000 brackets inside strings, with escaped quotes and backslashes among them.
  const std::string brackets = std::string(50000, '[') + R"(\"{\\)" + std::string(50000, '{');
  auto r = parse_chat_request(R"({"messages": [{"role": "user", "content": ")" + brackets + R"("}],
                                  "chat_template_kwargs": {"s": ")" + brackets + R"("}})");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const std::string content = r->messages[0]["content"].get<std::string>();
  EXPECT_EQ(content.size(), 100000u + 3u);
  EXPECT_EQ(content.substr(50000, 3), "\"{\\");
  EXPECT_EQ(r->chat_template_kwargs["s"], content);
}

TEST(Protocol, WideJsonStillParses) {
  // Wide is fine: 20,000 small objects in one array are only three levels deep.
  std::string messages = "[";
  for (int i = 0; i < 20000; ++i)
    messages += std::string(i ? "," : "") + R"({"role": "user", "content": "m)" + std::to_string(i) + R"("})";
  messages += "]";
  auto r = parse_chat_request(R"({"messages": )" + messages + "}");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->messages.size(), 20000u);
  EXPECT_EQ(r->messages[19999]["content"], "m19999");
}

// Hardening II: a role the templates do not know, or tool_calls that are not a list of calls, is
// a 400 naming the field (both used to pass to the template as given).
TEST(Protocol, MessageRolesAndToolCallsAreChecked) {
  auto wizard = parse_chat_request(R"({"messages": [{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}]})");
  ASSERT_FALSE(wizard.ok());
  EXPECT_EQ(wizard.error().param, "messages[1].role");
  EXPECT_NE(wizard.error().message.find("'wizard'"), std::string::npos);
  auto bad = parse_chat_request(R"({"messages": [{"role": "assistant", "content": "a", "tool_calls": "bad"}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().param, "messages[0].tool_calls");
  EXPECT_FALSE(parse_chat_request(R"({"messages": [{"role": "assistant", "tool_calls": [1]}]})").ok());
  auto dev = parse_chat_request(R"({"messages": [{"role": "developer", "content": "a"}, {"role": "user", "content": "b"}]})");
  ASSERT_TRUE(dev.ok()) << dev.error().message;
  EXPECT_EQ(dev->messages[0]["role"], "system");
  for (const char* role : {"system", "user", "assistant", "tool"})
    EXPECT_TRUE(parse_chat_request(std::string(R"({"messages": [{"role": ")") + role + R"(", "content": "a"}]})").ok()) << role;
}

// Hardening II: caps that are checked before the work they would multiply.
TEST(Protocol, StopAndToolsAreCappedInBytesAndCount) {
  const std::string msg = R"("messages": [{"role": "user", "content": "x"}])";
  const std::string big(kMaxStopBytes / 2 + 1, 's');
  auto two = parse_completion_request(R"({"prompt": "x", "stop": [")" + big + R"(", ")" + big + R"("]})");
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.error().param, "stop");
  EXPECT_NE(two.error().message.find("at most " + std::to_string(kMaxStopBytes)), std::string::npos);
  EXPECT_FALSE(parse_completion_request(R"({"prompt": "x", "stop": ")" + std::string(kMaxStopBytes + 1, 's') + R"("})").ok());
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "x", "stop": [")" + big + R"("]})").ok());

  auto tools = [](size_t n, size_t description_bytes) {
    std::string t = "[";
    for (size_t i = 0; i < n; ++i)
      t += std::string(i ? "," : "") + R"({"type": "function", "function": {"name": "f)" + std::to_string(i) +
           R"(", "description": ")" + std::string(description_bytes, 'd') + R"("}})";
    return t + "]";
  };
  auto many = parse_chat_request("{" + msg + R"(, "tools": )" + tools(10000, 1) + "}");
  ASSERT_FALSE(many.ok());
  EXPECT_EQ(many.error().param, "tools");
  EXPECT_NE(many.error().message.find("at most " + std::to_string(kMaxTools)), std::string::npos);
  auto heavy = parse_chat_request("{" + msg + R"(, "tools": )" + tools(8, kMaxToolsBytes / 8) + "}");
  ASSERT_FALSE(heavy.ok());
  EXPECT_NE(heavy.error().message.find("at most " + std::to_string(kMaxToolsBytes)), std::string::npos);
  auto fine = parse_chat_request("{" + msg + R"(, "tools": )" + tools(kMaxTools, 100) + "}");
  ASSERT_TRUE(fine.ok()) << fine.error().message;
  EXPECT_EQ(fine->tool_list.size(), kMaxTools);
}

}  // namespace
}  // namespace kvasir::server

namespace kvasir::server {
namespace {

// Fields that would change the output or the response's shape, which this server does not
// implement, are refused by name (never silently ignored); metadata fields and nulls are fine.
TEST(Protocol, UnsupportedFieldsAreRefusedByName) {
  for (const char* field : {"best_of", "suffix", "guided_regex", "guided_json", "structured_outputs", "guided_grammar"}) {
    const std::string body = std::string(R"({"prompt": "x", ")") + field + R"(": 2})";
    const ApiError e = completion_error(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, field);
    EXPECT_EQ(e.code, "unsupported_field");
    EXPECT_NE(e.message.find(field), std::string::npos);
  }
  for (const char* field : {"tool_choice", "parallel_tool_calls", "guided_json", "echo", "functions"}) {
    const std::string body = std::string(R"({"messages": [{"role": "user", "content": "x"}], ")") + field + R"(": 1})";
    EXPECT_EQ(chat_error(body).param, field);
  }
  // Chat fields are not completion fields and vice versa.
  EXPECT_EQ(completion_error(R"({"prompt": "x", "messages": []})").param, "messages");
}

// Scoring: max_tokens 0 only where something is scored; prompt_logprobs bounded like logprobs.
TEST(Protocol, PromptScoringFields) {
  auto ok = parse_completion_request(R"({"prompt": "x", "echo": true, "logprobs": 2, "max_tokens": 0})");
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->echo_logprobs);
  EXPECT_EQ(*ok->gen.max_tokens, 0);
  auto plain_echo = parse_completion_request(R"({"prompt": "x", "echo": true, "max_tokens": 0})");
  ASSERT_TRUE(plain_echo.ok());
  EXPECT_FALSE(plain_echo->echo_logprobs);
  auto vllm = parse_completion_request(R"({"prompt": "x", "prompt_logprobs": 5, "max_tokens": 0})");
  ASSERT_TRUE(vllm.ok());
  EXPECT_EQ(vllm->gen.prompt_logprobs, 5);
  EXPECT_EQ(completion_error(R"({"prompt": "x", "max_tokens": 0})").param, "max_tokens");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "prompt_logprobs": 21})").param, "prompt_logprobs");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "prompt_logprobs": -1})").param, "prompt_logprobs");
  EXPECT_EQ(chat_error(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})").param, "max_tokens");
  auto chat = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0, "prompt_logprobs": 0})");
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->gen.prompt_logprobs, 0);
}

// response_format (both endpoints), grammar and json_schema become one OutputFormat; every
// unknown key inside them is refused by its full name.
TEST(Protocol, OutputFormats) {
  auto format_of = [](const std::string& extra) {
    auto r = parse_completion_request(R"({"prompt": "x", )" + extra + "}");
    EXPECT_TRUE(r.ok()) << extra << ": " << (r.ok() ? "" : r.error().message);
    return r.ok() ? r->gen.format : std::nullopt;
  };
  EXPECT_FALSE(format_of(R"("response_format": {"type": "text"})"));
  EXPECT_EQ(format_of(R"("response_format": {"type": "json_object"})")->kind, OutputFormat::Kind::json_object);
  auto js = format_of(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
                         "schema": {"type": "object", "properties": {"z": {}, "a": {}}}}})");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->kind, OutputFormat::Kind::json_schema);
  EXPECT_EQ(js->text, R"({"type":"object","properties":{"z":{},"a":{}}})");  // the schema's own order
  EXPECT_EQ(js->param, "response_format.json_schema.schema");
  EXPECT_EQ(format_of(R"("grammar": "root ::= \"a\"")")->kind, OutputFormat::Kind::gbnf);
  EXPECT_EQ(format_of(R"("json_schema": {"type": "string"})")->text, R"({"type":"string"})");
  auto chat = parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(chat.ok());
  EXPECT_TRUE(chat->gen.format);
  const std::pair<const char*, const char*> bad[] = {
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}, "extra": 1}})",
       "response_format.json_schema.extra"},
      {R"("response_format": {"type": "json_object", "schema": {}})", "response_format.schema"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema"},
      {R"("response_format": "json")", "response_format.type"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})", "response_format.json_schema.schema"},
      {R"("grammar": "")", "grammar"},
      {R"("json_schema": "x")", "json_schema"},
      {R"("grammar": "root ::= \"a\"", "json_schema": {})", "grammar"},
  };
  for (const auto& [extra, param] : bad) EXPECT_EQ(completion_error(R"({"prompt": "x", )" + std::string(extra) + "}").param, param) << extra;
}

TEST(Protocol, MetadataFieldsAndNullsAreAccepted) {
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "x", "user": "u", "metadata": {"k": "v"}, "store": false})").ok());
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "x", "best_of": null, "suffix": null})").ok());
  EXPECT_TRUE(parse_chat_request(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": null,
                                     "metadata": {}, "store": true})")
                  .ok());
}

}  // namespace
}  // namespace kvasir::server
