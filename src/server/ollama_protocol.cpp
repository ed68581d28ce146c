#include "server/ollama_protocol.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <initializer_list>
#include <limits>

namespace kvasir::server::ollama {
namespace {

std::optional<ApiError> only_known(const ordered_json& obj, std::initializer_list<std::string_view> known,
                                   const std::string& prefix) {
  for (const auto& [key, value] : obj.items()) {
    // Ollama's client sends empty values for what it was not given ("tools": [], "format": "").
    const bool empty = value.is_null() || (value.is_array() && value.empty()) ||
                       (value.is_string() && value.get_ref<const std::string&>().empty());
    if (empty) continue;
    bool ok = false;
    for (auto k : known) ok = ok || k == key;
    if (!ok)
      return bad_request("'" + prefix + key + "' is not supported by this server (see docs/API.md)", prefix + key,
                         "unsupported_field");
  }
  return std::nullopt;
}

// A number field of `obj` in [lo, hi] into out (unchanged when absent).
template <typename T>
std::optional<ApiError> number(const ordered_json& obj, const char* key, const std::string& prefix, double lo, double hi,
                               T& out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  const std::string name = prefix + key;
  if (!it->is_number() || (std::is_integral_v<T> && !it->is_number_integer()))
    return bad_request("'" + name + "' must be a" + (std::is_integral_v<T> ? "n integer" : " number"), name);
  const double x = it->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    return bad_request("'" + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi), name);
  out = static_cast<T>(x);
  return std::nullopt;
}

// Fields common to /api/generate and /api/chat, with Ollama's defaults.
std::optional<ApiError> read_common(const ordered_json& doc, Request& r) {
  GenerationRequest& g = r.gen;
  g.sampling.temperature = 0.8f;
  g.sampling.top_k = 40;
  g.sampling.top_p = 0.9f;
  g.sampling.repetition_penalty = 1.1f;
  g.stream = true;
  if (auto it = doc.find("model"); it != doc.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'model' must be a string", "model");
    g.model = it->get<std::string>();
  }
  if (g.model.empty()) return bad_request("'model' is required", "model");
  if (auto it = doc.find("stream"); it != doc.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad_request("'stream' must be a boolean", "stream");
    g.stream = it->get<bool>();
  }
  if (auto it = doc.find("think"); it != doc.end() && !it->is_null() && *it != false)
    return bad_request("'think' is not supported by this server", "think", "unsupported_field");
  // "format": "json" (any JSON value's object form) or a JSON Schema; "" is the client's unset.
  if (auto it = doc.find("format"); it != doc.end() && !it->is_null() && *it != "") {
    if (*it == "json") g.format = OutputFormat{OutputFormat::Kind::json_object, "", "format"};
    else if (it->is_object()) g.format = OutputFormat{OutputFormat::Kind::json_schema, it->dump(), "format"};
    else return bad_request("'format' must be \"json\" or a JSON Schema object", "format");
  }
  auto opts = doc.find("options");
  if (opts == doc.end() || opts->is_null()) return std::nullopt;
  if (!opts->is_object()) return bad_request("'options' must be an object", "options");
  const std::string p = "options.";
  if (auto e = check_options(*opts)) return e;
  if (auto e = number(*opts, "temperature", p, 0, 2, g.sampling.temperature)) return e;
  int32_t top_k = g.sampling.top_k;
  if (auto e = number(*opts, "top_k", p, -1, std::numeric_limits<int32_t>::max(), top_k)) return e;
  g.sampling.top_k = std::max(0, top_k);
  if (auto e = number(*opts, "top_p", p, 0, 1, g.sampling.top_p)) return e;
  if (g.sampling.top_p <= 0) g.sampling.top_p = 1;  // Ollama: 0 disables
  if (auto e = number(*opts, "min_p", p, 0, 1, g.sampling.min_p)) return e;
  if (auto e = number(*opts, "repeat_penalty", p, 0, 10, g.sampling.repetition_penalty)) return e;
  if (g.sampling.repetition_penalty <= 0) g.sampling.repetition_penalty = 1;
  if (auto e = number(*opts, "presence_penalty", p, -2, 2, g.sampling.presence_penalty)) return e;
  if (auto e = number(*opts, "frequency_penalty", p, -2, 2, g.sampling.frequency_penalty)) return e;
  int64_t seed = -1;
  if (auto e = number(*opts, "seed", p, double(std::numeric_limits<int64_t>::min()), 9.2e18, seed)) return e;
  if (opts->contains("seed") && !(*opts)["seed"].is_null()) g.sampling.seed = uint64_t(seed);
  int32_t num_predict = -1;
  if (auto e = number(*opts, "num_predict", p, -2, std::numeric_limits<int32_t>::max(), num_predict)) return e;
  if (num_predict == 0) return bad_request("'options.num_predict' must not be 0", "options.num_predict");
  if (num_predict > 0) g.max_tokens = num_predict;  // -1 (infinite) and -2 (fill the context): the rest of it
  if (auto it = opts->find("stop"); it != opts->end() && !it->is_null()) {
    if (!it->is_array()) return bad_request("'options.stop' must be an array of strings", "options.stop");
    for (const auto& s : *it) {
      if (!s.is_string()) return bad_request("'options.stop' must be an array of strings", "options.stop");
      if (!s.get_ref<const std::string&>().empty()) g.stop.push_back(s.get<std::string>());
    }
  }
  return std::nullopt;
}

ordered_json done_reason(engine::FinishReason f) {
  switch (f) {
    case engine::FinishReason::Length: return "length";
    case engine::FinishReason::Abort: return "abort";
    default: return "stop";
  }
}

}  // namespace

// The option names Ollama's clients send: sampling ones (read by generation) and runtime knobs that
// do not change the output (accepted: this server sizes itself at start). Anything else is a 400.
std::optional<ApiError> check_options(const ordered_json& opts) {
  return only_known(opts,
                    {"temperature", "top_k", "top_p", "min_p", "num_predict", "stop", "seed", "repeat_penalty",
                     "presence_penalty", "frequency_penalty", "repeat_last_n", "num_ctx", "num_batch", "num_gpu",
                     "main_gpu", "num_thread", "use_mmap", "use_mlock", "numa", "low_vram", "num_keep"},
                    "options.");
}

Parsed<Request> parse_chat(std::string_view body) {
  auto doc = parse_json_object(body);
  if (!doc) return doc.error();
  return parse_chat(JsonBody{std::move(*doc)});
}

Parsed<Request> parse_chat(JsonBody body) {
  if (!body.doc.is_object()) return bad_request("the request body must be a JSON object", {}, "invalid_json");
  ordered_json* doc = &body.doc;
  if (auto e = only_known(*doc, {"model", "messages", "stream", "options", "keep_alive", "think", "format", "tools"}, ""))
    return *e;
  Request r;
  r.is_chat = true;
  if (auto e = read_common(*doc, r)) return *e;
  if (auto t = doc->find("tools"); t != doc->end() && !t->is_null() && !(t->is_array() && t->empty())) {
    if (auto e = read_function_tools(*t, r.tool_list)) return *e;
    r.tools = *t;
  }
  auto it = doc->find("messages");
  if (it == doc->end() || !it->is_array() || it->empty())
    return bad_request("'messages' must be a non-empty array", "messages");
  r.messages = ordered_json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& m = (*it)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request("'" + at + "' must be an object", at);
    if (auto e = only_known(m, {"role", "content", "tool_calls", "tool_name"}, at + ".")) return *e;
    if (!m.contains("role") || !m["role"].is_string()) return bad_request("'" + at + ".role' must be a string", at + ".role");
    if (const std::string& role = m["role"].get_ref<const std::string&>();
        role != "system" && role != "user" && role != "assistant" && role != "tool")
      return bad_request("'" + at + ".role' is '" + role + "'; it must be system, user, assistant or tool", at + ".role");
    const ordered_json content = m.value("content", ordered_json(""));
    if (!content.is_string()) return bad_request("'" + at + ".content' must be a string", at + ".content");
    ordered_json out{{"role", m["role"]}, {"content", content}};
    // Earlier calls ({"function": {"name", "arguments": {...}}}) and the results' function names,
    // as the chat templates read them.
    if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null() && !(tc->is_array() && tc->empty())) {
      if (!tc->is_array()) return bad_request("'" + at + ".tool_calls' must be an array", at + ".tool_calls");
      out["tool_calls"] = ordered_json::array();
      for (size_t k = 0; k < tc->size(); ++k) {
        const ordered_json& c = (*tc)[k];
        const std::string cat = at + ".tool_calls[" + std::to_string(k) + "]";
        const auto fn = c.is_object() ? c.find("function") : c.end();
        if (!c.is_object() || fn == c.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string())
          return bad_request("'" + cat + "' must be {\"function\": {\"name\", \"arguments\"}}", cat);
        ordered_json args = fn->value("arguments", ordered_json::object());
        if (!args.is_object()) return bad_request("'" + cat + ".function.arguments' must be an object", cat + ".function.arguments");
        out["tool_calls"].push_back({{"type", "function"}, {"function", {{"name", (*fn)["name"]}, {"arguments", std::move(args)}}}});
      }
    }
    if (auto tn = m.find("tool_name"); tn != m.end() && tn->is_string() && !tn->get_ref<const std::string&>().empty())
      out["name"] = *tn;
    r.messages.push_back(std::move(out));
  }
  return r;
}

Parsed<Request> parse_generate(std::string_view body) {
  auto doc = parse_json_object(body);
  if (!doc) return doc.error();
  return parse_generate(JsonBody{std::move(*doc)});
}

Parsed<Request> parse_generate(JsonBody body) {
  if (!body.doc.is_object()) return bad_request("the request body must be a JSON object", {}, "invalid_json");
  ordered_json* doc = &body.doc;
  if (auto e = only_known(*doc, {"model", "prompt", "system", "stream", "options", "keep_alive", "raw", "think", "format"}, ""))
    return *e;
  Request r;
  if (auto e = read_common(*doc, r)) return *e;
  if (auto it = doc->find("prompt"); it != doc->end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'prompt' must be a string", "prompt");
    r.prompt = it->get<std::string>();
  }
  if (auto it = doc->find("raw"); it != doc->end() && !it->is_null()) {
    if (!it->is_boolean()) return bad_request("'raw' must be a boolean", "raw");
    r.raw = it->get<bool>();
  }
  r.messages = ordered_json::array();
  if (auto it = doc->find("system"); it != doc->end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'system' must be a string", "system");
    if (r.raw) return bad_request("'system' has no effect with \"raw\": true", "system");
    if (!it->get_ref<const std::string&>().empty()) r.messages.push_back({{"role", "system"}, {"content", *it}});
  }
  r.messages.push_back({{"role", "user"}, {"content", r.prompt}});
  return r;
}

bool same_model(std::string_view requested, std::string_view served) {
  if (requested == served) return true;
  constexpr std::string_view kLatest = ":latest";
  return requested.size() == served.size() + kLatest.size() && requested.starts_with(served) &&
         requested.ends_with(kLatest);
}

std::string timestamp_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[80];
  std::snprintf(out, sizeof out, "%s.%06lldZ", buf, static_cast<long long>(us));
  return out;
}

ordered_json chunk(bool is_chat, const std::string& model, const std::string& text, bool done,
                   engine::FinishReason finish, const Stats* stats, const std::vector<ToolCall>& calls) {
  ordered_json out{{"model", model}, {"created_at", timestamp_now()}};
  if (is_chat) out["message"] = {{"role", "assistant"}, {"content", text}};
  else out["response"] = text;
  if (is_chat && !calls.empty()) {
    ordered_json list = ordered_json::array();
    for (const ToolCall& c : calls)
      list.push_back({{"function", {{"name", c.name}, {"arguments", ordered_json::parse(c.arguments, nullptr, false)}}}});
    out["message"]["tool_calls"] = std::move(list);
  }
  out["done"] = done;
  if (!done) return out;
  out["done_reason"] = done_reason(finish);
  if (stats) {
    auto ns = [](double ms) { return ms < 0 ? int64_t(0) : int64_t(ms * 1e6); };
    const engine::Timings& t = stats->timings;
    const double eval_ms = t.tpot_ms >= 0 ? t.tpot_ms * double(std::max<int64_t>(stats->completion_tokens - 1, 0)) : 0;
    out["total_duration"] = ns(t.e2e_ms);
    out["load_duration"] = 0;  // the model is loaded at start-up
    out["prompt_eval_count"] = stats->prompt_tokens;
    out["prompt_eval_duration"] = ns(t.ttft_ms >= 0 ? t.ttft_ms - std::max(t.queue_ms, 0.0) : -1);
    out["eval_count"] = stats->completion_tokens;
    out["eval_duration"] = ns(eval_ms);
  }
  return out;
}

}  // namespace kvasir::server::ollama
