// OpenAI response objects built from engine output: whole responses, stream chunks, usage and
// logprobs, for /v1/completions ("text_completion") and /v1/chat/completions ("chat.completion").
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/tool_calls.h"

namespace kvasir::server {

using ordered_json = nlohmann::ordered_json;

enum class Endpoint { completions, chat };

// Identity shared by a response and all of its chunks.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::completions;
  std::string id = {};  // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model = {};
};
ResponseMeta make_meta(Endpoint endpoint, std::string model);  // fresh random id, current time

struct UsageTotals {
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

// One finished choice of a non-streaming response.
struct ChoiceOutput {
  int32_t index = 0;
  std::string text = {};
  int64_t echo_bytes = 0;  // the echoed prompt at the start of text: the first token's text_offset
  std::vector<engine::TokenLogprob> logprobs = {};
  std::vector<engine::TokenLogprob> prompt_logprobs = {};  // when the prompt was scored
  engine::FinishReason finish = engine::FinishReason::None;
  std::vector<ToolCall> tool_calls = {};  // chat: the calls parsed out of the answer (then text is the rest)
};

// "stop" (EOS, stop token or stop string), "length", "abort"; null while unfinished. A chat answer
// that called tools ends with "tool_calls" instead of "stop".
ordered_json finish_reason_json(engine::FinishReason reason);
ordered_json usage_json(const UsageTotals& usage);

// Completions: {tokens, token_logprobs, top_logprobs: [{piece: logprob}], text_offset}.
// `offset` is the text offset of the first token; it is advanced past each token.
ordered_json completion_logprobs_json(const Tokenizer& tokenizer, std::span<const engine::TokenLogprob> logprobs,
                                      int64_t& offset);
// Completions with echo: the prompt's tokens first (the first one's logprob and alternatives null,
// as OpenAI sent them; offsets from 0 through the echoed text, control tokens taking none), then
// the answer's from `echo_bytes`.
ordered_json echo_logprobs_json(const Tokenizer& tokenizer, std::span<const engine::TokenLogprob> prompt,
                                std::span<const engine::TokenLogprob> answer, int64_t echo_bytes);
// vLLM's prompt_logprobs: [null, {"<id>": {logprob, rank, decoded_token}, ...}, ...], each entry
// the prompt token itself and its row's most likely alternatives.
ordered_json prompt_logprobs_json(const Tokenizer& tokenizer, std::span<const engine::TokenLogprob> prompt);
// Chat: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
ordered_json chat_logprobs_json(const Tokenizer& tokenizer, std::span<const engine::TokenLogprob> logprobs,
                                bool with_top);

// A whole non-streaming response. `logprobs`: whether they were requested (else null per choice);
// `top_logprobs` the number of alternatives asked for (chat prints none with 0).
struct ScoringOptions {
  bool echo_logprobs = false;    // completions echo + logprobs
  bool prompt_logprobs = false;  // vLLM's prompt_logprobs: per choice (completions) or top level (chat)
};
ordered_json full_response(const ResponseMeta& meta, const Tokenizer& tokenizer, std::span<const ChoiceOutput> choices,
                           const UsageTotals& usage, bool logprobs, int32_t top_logprobs, ScoringOptions scoring = {});

// One stream chunk for one choice: `text` new text, `logprobs` json (null for none), `finish`
// None while the choice goes on. `first` (chat only) adds the assistant role to the delta.
struct ChunkContent {
  int32_t index = 0;
  std::string text = {};
  ordered_json logprobs = nullptr;  // null: none
  engine::FinishReason finish = engine::FinishReason::None;
  bool first = false;
  bool with_usage_field = false;  // include_usage: every chunk carries "usage": null
  ordered_json tool_calls = nullptr;  // chat: delta.tool_calls entries (null: none)
  bool called_tools = false;          // the finish reason is "tool_calls"
  ordered_json prompt_logprobs = nullptr;  // vLLM's, with the chunk that first has them (null: none)
};
ordered_json stream_chunk(const ResponseMeta& meta, const ChunkContent& content);
// The last chunk when include_usage is set: no choices, only usage.
ordered_json usage_chunk(const ResponseMeta& meta, const UsageTotals& usage);

// Serializes for the wire; never throws (invalid UTF-8 is replaced by U+FFFD).
std::string dump_json(const ordered_json& value);

}  // namespace kvasir::server
