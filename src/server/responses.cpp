#include "server/responses.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <random>

namespace kvasir::server {

namespace {

// JSON has no -inf; vLLM prints a large negative number instead.
double finite_logprob(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

ordered_json bytes_json(const std::string& s) {
  ordered_json b = ordered_json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

const char* object_name(Endpoint e, bool chunk) {
  if (e == Endpoint::chat) return chunk ? "chat.completion.chunk" : "chat.completion";
  return "text_completion";
}

ordered_json header(const ResponseMeta& meta, bool chunk) {
  return ordered_json{{"id", meta.id}, {"object", object_name(meta.endpoint, chunk)}, {"created", meta.created},
                      {"model", meta.model}};
}

}  // namespace

ResponseMeta make_meta(Endpoint endpoint, std::string model) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", (unsigned long long)rng(), (unsigned long long)rng());
  return ResponseMeta{.endpoint = endpoint,
                      .id = std::string(endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-") + hex,
                      .created = int64_t(std::time(nullptr)),
                      .model = std::move(model)};
}

ordered_json finish_reason_json(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::None: return nullptr;
    case engine::FinishReason::Stop:
    case engine::FinishReason::StopString: return "stop";
    case engine::FinishReason::Length: return "length";
    case engine::FinishReason::Abort: return "abort";
  }
  return nullptr;
}

ordered_json usage_json(const UsageTotals& u) {
  return ordered_json{{"prompt_tokens", u.prompt_tokens},
                      {"completion_tokens", u.completion_tokens},
                      {"total_tokens", u.prompt_tokens + u.completion_tokens},
                      {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

ordered_json completion_logprobs_json(const Tokenizer& tok, std::span<const engine::TokenLogprob> lps,
                                      int64_t& offset) {
  ordered_json tokens = ordered_json::array(), token_lps = ordered_json::array(), tops = ordered_json::array(),
               offsets = ordered_json::array();
  for (const auto& lp : lps) {
    const std::string piece = tok.piece(lp.token);
    tokens.push_back(piece);
    token_lps.push_back(finite_logprob(lp.logprob));
    ordered_json top = ordered_json::object();
    for (const auto& [id, v] : lp.top) {
      const std::string p = tok.piece(id);
      if (!top.contains(p)) top[p] = finite_logprob(v);  // two ids with one text: keep the likelier
    }
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += int64_t(piece.size());
  }
  return ordered_json{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(token_lps)},
                      {"top_logprobs", std::move(tops)},
                      {"text_offset", std::move(offsets)}};
}

ordered_json echo_logprobs_json(const Tokenizer& tok, std::span<const engine::TokenLogprob> prompt,
                                std::span<const engine::TokenLogprob> answer, int64_t echo_bytes) {
  ordered_json tokens = ordered_json::array(), token_lps = ordered_json::array(), tops = ordered_json::array(),
               offsets = ordered_json::array();
  int64_t offset = 0;
  for (const auto& lp : prompt) {
    const std::string piece = tok.piece(lp.token);
    tokens.push_back(piece);
    const bool none = std::isnan(lp.logprob);
    token_lps.push_back(none ? ordered_json(nullptr) : ordered_json(finite_logprob(lp.logprob)));
    ordered_json top = none ? ordered_json(nullptr) : ordered_json::object();
    for (const auto& [id, v] : lp.top) {
      const std::string p = tok.piece(id);
      if (!top.contains(p)) top[p] = finite_logprob(v);
    }
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    if (!tok.is_special(lp.token)) offset += int64_t(piece.size());
  }
  offset = echo_bytes;
  ordered_json rest = completion_logprobs_json(tok, answer, offset);
  for (auto& v : rest["tokens"]) tokens.push_back(std::move(v));
  for (auto& v : rest["token_logprobs"]) token_lps.push_back(std::move(v));
  for (auto& v : rest["top_logprobs"]) tops.push_back(std::move(v));
  for (auto& v : rest["text_offset"]) offsets.push_back(std::move(v));
  return ordered_json{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(token_lps)},
                      {"top_logprobs", std::move(tops)},
                      {"text_offset", std::move(offsets)}};
}

ordered_json prompt_logprobs_json(const Tokenizer& tok, std::span<const engine::TokenLogprob> prompt) {
  ordered_json out = ordered_json::array();
  for (const auto& lp : prompt) {
    if (std::isnan(lp.logprob)) {
      out.push_back(nullptr);
      continue;
    }
    ordered_json entry = ordered_json::object();
    entry[std::to_string(lp.token)] = {{"logprob", finite_logprob(lp.logprob)}, {"rank", lp.rank},
                                       {"decoded_token", tok.piece(lp.token)}};
    for (size_t i = 0; i < lp.top.size(); ++i) {
      const std::string key = std::to_string(lp.top[i].first);
      if (entry.contains(key)) continue;
      entry[key] = {{"logprob", finite_logprob(lp.top[i].second)}, {"rank", int32_t(i + 1)},
                    {"decoded_token", tok.piece(lp.top[i].first)}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

ordered_json chat_logprobs_json(const Tokenizer& tok, std::span<const engine::TokenLogprob> lps, bool with_top) {
  ordered_json content = ordered_json::array();
  for (const auto& lp : lps) {
    const std::string piece = tok.piece(lp.token);
    ordered_json entry{{"token", piece}, {"logprob", finite_logprob(lp.logprob)}, {"bytes", bytes_json(piece)}};
    ordered_json top = ordered_json::array();
    if (with_top) {
      for (const auto& [id, v] : lp.top) {
        const std::string p = tok.piece(id);
        top.push_back(ordered_json{{"token", p}, {"logprob", finite_logprob(v)}, {"bytes", bytes_json(p)}});
      }
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return ordered_json{{"content", std::move(content)}};
}

ordered_json full_response(const ResponseMeta& meta, const Tokenizer& tok, std::span<const ChoiceOutput> choices,
                           const UsageTotals& usage, bool logprobs, int32_t top_logprobs, ScoringOptions scoring) {
  ordered_json out = header(meta, false);
  ordered_json list = ordered_json::array();
  for (const ChoiceOutput& c : choices) {
    ordered_json choice{{"index", c.index}};
    if (meta.endpoint == Endpoint::chat) {
      choice["message"] = ordered_json{{"role", "assistant"}, {"content", c.text}};
      if (!c.tool_calls.empty()) {
        ordered_json calls = ordered_json::array();
        for (const ToolCall& t : c.tool_calls)
          calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = std::move(calls);
      }
      choice["logprobs"] = logprobs ? chat_logprobs_json(tok, c.logprobs, top_logprobs > 0) : ordered_json(nullptr);
    } else {
      choice["text"] = c.text;
      int64_t offset = c.echo_bytes;  // as a stream counts: from the start of the echoed text
      if (scoring.echo_logprobs) choice["logprobs"] = echo_logprobs_json(tok, c.prompt_logprobs, c.logprobs, c.echo_bytes);
      else choice["logprobs"] = logprobs ? completion_logprobs_json(tok, c.logprobs, offset) : ordered_json(nullptr);
      if (scoring.prompt_logprobs) choice["prompt_logprobs"] = prompt_logprobs_json(tok, c.prompt_logprobs);
    }
    const bool called = !c.tool_calls.empty() && c.finish == engine::FinishReason::Stop;
    choice["finish_reason"] = called ? ordered_json("tool_calls") : finish_reason_json(c.finish);
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  if (meta.endpoint == Endpoint::chat && scoring.prompt_logprobs && !choices.empty())
    out["prompt_logprobs"] = prompt_logprobs_json(tok, choices[0].prompt_logprobs);  // one prompt
  out["usage"] = usage_json(usage);
  return out;
}

ordered_json stream_chunk(const ResponseMeta& meta, const ChunkContent& c) {
  ordered_json out = header(meta, true);
  ordered_json choice{{"index", c.index}};
  if (meta.endpoint == Endpoint::chat) {
    ordered_json delta = ordered_json::object();
    if (c.first) delta["role"] = "assistant";
    if (!c.text.empty() || c.first) delta["content"] = c.text;
    if (!c.tool_calls.is_null()) delta["tool_calls"] = c.tool_calls;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = c.text;
  }
  choice["logprobs"] = c.logprobs;
  const bool called = c.called_tools && c.finish == engine::FinishReason::Stop;
  choice["finish_reason"] = called ? ordered_json("tool_calls") : finish_reason_json(c.finish);
  if (!c.prompt_logprobs.is_null() && meta.endpoint == Endpoint::completions) choice["prompt_logprobs"] = c.prompt_logprobs;
  out["choices"] = ordered_json::array({std::move(choice)});
  if (!c.prompt_logprobs.is_null() && meta.endpoint == Endpoint::chat) out["prompt_logprobs"] = c.prompt_logprobs;
  if (c.with_usage_field) out["usage"] = nullptr;
  return out;
}

ordered_json usage_chunk(const ResponseMeta& meta, const UsageTotals& usage) {
  ordered_json out = header(meta, true);
  out["choices"] = ordered_json::array();
  out["usage"] = usage_json(usage);
  return out;
}

std::string dump_json(const ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvasir::server
