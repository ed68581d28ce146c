#include "server/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <span>

namespace kvasir::server {

bool known_service_tier(const std::string& tier) {
  for (const char* t : {"auto", "default", "priority", "interactive", "flex", "batch"})
    if (tier == t) return true;
  return false;
}


ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{.status = 400, .message = std::move(message), .param = std::move(param), .code = std::move(code)};
}

namespace {
ApiError not_an_object() { return bad_request("the request body must be a JSON object", {}, "invalid_json"); }
}  // namespace

Parsed<ordered_json> parse_json_object(std::string_view body) {
  // Parsing itself is iterative; what later walks the value (copies, dump, templates) recurses.
  if (json_nesting_depth(body, kMaxJsonDepth + 1) > kMaxJsonDepth)
    return bad_request("the request body nests arrays and objects more than " + std::to_string(kMaxJsonDepth) +
                           " levels deep",
                       {}, "json_too_deep");
  if (json_max_object_members(body, kMaxJsonObjectMembers + 1) > kMaxJsonObjectMembers)
    return bad_request("an object in the request body has more than " + std::to_string(kMaxJsonObjectMembers) +
                           " members",
                       {}, "json_object_too_large");
  ordered_json doc = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return bad_request("the request body is not valid JSON", {}, "invalid_json");
  if (!doc.is_object()) return not_an_object();
  return doc;
}

ordered_json error_json(const ApiError& e) {
  ordered_json err;
  err["message"] = e.message;
  err["type"] = e.type;
  err["param"] = e.param.empty() ? ordered_json(nullptr) : ordered_json(e.param);
  err["code"] = e.code.empty() ? ordered_json(nullptr) : ordered_json(e.code);
  return ordered_json{{"error", std::move(err)}};
}

std::string error_body(const ApiError& e) {
  return error_json(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

size_t json_nesting_depth(std::string_view json, size_t stop_at) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size() && deepest < stop_at; ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character (\" included) cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

size_t json_max_object_members(std::string_view json, size_t stop_at) {
  // Per open bracket: its commas so far, or SIZE_MAX for an array (whose length costs nothing).
  size_t commas[kMaxJsonDepth + 1];
  size_t depth = 0, largest = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size() && largest < stop_at; ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (depth == kMaxJsonDepth + 1) break;  // json_nesting_depth refuses it
      commas[depth++] = c == '[' ? SIZE_MAX : 0;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    } else if (c == ',' && depth > 0 && commas[depth - 1] != SIZE_MAX) {
      largest = std::max(largest, ++commas[depth - 1] + 1);
    }
  }
  return largest;
}

namespace {

// Reads typed fields of one JSON object; the first problem is kept and later reads are no-ops, so
// a parser reads every field in a row and checks `error` once.
class Fields {
 public:
  Fields(const ordered_json& obj, std::string prefix = {}) : obj_(obj), prefix_(std::move(prefix)) {}

  std::optional<ApiError> error;

  // The value when present and not null.
  const ordered_json* find(const char* key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  std::string name(const char* key) const { return prefix_ + key; }

  void fail(const char* key, std::string message) {
    if (!error) error = bad_request(std::move(message), name(key));
  }

  template <typename Int>
  void integer(const char* key, Int& out, int64_t lo, int64_t hi) {
    const ordered_json* v = find(key);
    if (!v || error) return;
    if (!v->is_number_integer()) return fail(key, "'" + name(key) + "' must be an integer");
    // Unsigned values above INT64_MAX are out of any range we accept.
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      return fail(key, range_message(key, lo, hi));
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) return fail(key, range_message(key, lo, hi));
    out = Int(x);
  }
  template <typename Int>
  void integer(const char* key, std::optional<Int>& out, int64_t lo, int64_t hi) {
    if (!find(key)) return;
    Int x{};
    integer(key, x, lo, hi);
    if (!error) out = x;
  }

  void number(const char* key, float& out, double lo, double hi, bool lo_open = false) {
    const ordered_json* v = find(key);
    if (!v || error) return;
    if (!v->is_number()) return fail(key, "'" + name(key) + "' must be a number");
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
      return fail(key, "'" + name(key) + "' must be " + (lo_open ? "> " : ">= ") + fmt(lo) + " and <= " + fmt(hi) +
                           ", got " + fmt(x));
    }
    out = float(x);
  }

  void boolean(const char* key, bool& out) {
    const ordered_json* v = find(key);
    if (!v || error) return;
    if (!v->is_boolean()) return fail(key, "'" + name(key) + "' must be a boolean");
    out = v->get<bool>();
  }

  void string(const char* key, std::string& out) {
    const ordered_json* v = find(key);
    if (!v || error) return;
    if (!v->is_string()) return fail(key, "'" + name(key) + "' must be a string");
    out = v->get<std::string>();
  }

  static std::string fmt(double x) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
  }

 private:
  std::string range_message(const char* key, int64_t lo, int64_t hi) const {
    std::string m = "'" + name(key) + "' must be an integer";
    if (hi == std::numeric_limits<int64_t>::max()) return m + " >= " + std::to_string(lo);
    return m + " between " + std::to_string(lo) + " and " + std::to_string(hi);
  }

  const ordered_json& obj_;
  std::string prefix_;
};

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

// Moves the value of `key` out of the request document (which is parsed once and owned by the
// parser), so that large client values are not deep-copied.
ordered_json take(ordered_json& doc, const char* key) { return std::move(doc[key]); }

// A token id list; `param` names the field in errors.
std::optional<ApiError> read_ids(const ordered_json& v, const std::string& param, std::vector<int32_t>& out) {
  if (!v.is_array()) return bad_request("'" + param + "' must be an array of token ids", param);
  out.reserve(v.size());
  for (const auto& x : v) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > kI32Max || x.is_number_float())
      return bad_request("'" + param + "' must hold non-negative integer token ids", param);
    out.push_back(int32_t(x.get<int64_t>()));
  }
  return std::nullopt;
}

void read_stop(Fields& f, std::vector<std::string>& out) {
  const ordered_json* v = f.find("stop");
  if (!v || f.error) return;
  auto add = [&](const ordered_json& s) {
    if (!s.is_string()) return false;
    if (!s.get_ref<const std::string&>().empty()) out.push_back(s.get<std::string>());  // "" never matches anything useful
    return true;
  };
  if (v->is_string()) {
    add(*v);
    if (v->get_ref<const std::string&>().size() > kMaxStopBytes)
      return f.fail("stop", "'stop' holds " + std::to_string(v->get_ref<const std::string&>().size()) +
                                " bytes; at most " + std::to_string(kMaxStopBytes));
    return;
  }
  if (!v->is_array()) return f.fail("stop", "'stop' must be a string or an array of strings");
  if (v->size() > kMaxStopStrings)
    return f.fail("stop", "'stop' holds at most " + std::to_string(kMaxStopStrings) + " strings");
  for (const auto& s : *v) {
    if (!add(s)) return f.fail("stop", "'stop' must be a string or an array of strings");
  }
  size_t bytes = 0;
  for (const std::string& s : out) bytes += s.size();
  if (bytes > kMaxStopBytes)
    return f.fail("stop", "'stop' strings hold " + std::to_string(bytes) + " bytes together; at most " +
                              std::to_string(kMaxStopBytes));
}

void read_logit_bias(Fields& f, std::vector<std::pair<int32_t, float>>& out) {
  const ordered_json* v = f.find("logit_bias");
  if (!v || f.error) return;
  if (!v->is_object()) return f.fail("logit_bias", "'logit_bias' must be an object of token id -> bias");
  for (const auto& [key, bias] : v->items()) {
    char* end = nullptr;
    errno = 0;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || errno || id < 0 || id > kI32Max)
      return f.fail("logit_bias", "'logit_bias' keys must be token ids, got '" + key + "'");
    if (!bias.is_number() || !std::isfinite(bias.get<double>()) || std::fabs(bias.get<double>()) > 100.0)
      return f.fail("logit_bias", "'logit_bias' values must be numbers between -100 and 100");
    out.emplace_back(int32_t(id), bias.get<float>());
  }
}

// Every field a request may carry: the ones that change what is generated (read below) and the
// ones that only label the request for the caller (user, metadata, store). Anything else, e.g.
// best_of, suffix, guided_json, grammar, tool_choice, is refused by name, so a client never
// believes it got something it asked for; a null value counts as absent.
constexpr std::string_view kGenerationFields[] = {
    "model", "max_tokens", "max_completion_tokens", "min_tokens", "temperature", "top_p", "top_k", "min_p",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "stop", "stop_token_ids", "n", "stream",
    "stream_options", "logit_bias", "ignore_eos", "speculative", "cache_salt", "user", "priority", "metadata", "store",
    "service_tier", "ttft_deadline_ms", "response_format", "grammar", "json_schema", "prompt_logprobs"};
constexpr std::string_view kCompletionFields[] = {"prompt", "logprobs", "echo"};
constexpr std::string_view kChatFields[] = {"messages", "logprobs", "top_logprobs", "add_generation_prompt",
                                            "continue_final_message", "tools", "chat_template_kwargs",
                                            "tool_choice", "parallel_tool_calls"};

std::optional<ApiError> reject_unknown_fields(const ordered_json& doc, std::span<const std::string_view> endpoint) {
  auto known = [&](const std::string& key) {
    for (auto k : kGenerationFields)
      if (k == key) return true;
    for (auto k : endpoint)
      if (k == key) return true;
    return false;
  };
  for (const auto& [key, value] : doc.items()) {
    if (value.is_null() || known(key)) continue;
    return bad_request("'" + key + "' is not supported by this server (see docs/API.md for the supported fields)", key,
                       "unsupported_field");
  }
  return std::nullopt;
}

bool valid_tool_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

// Before any tool is read (copied, compiled): at most kMaxTools of at most kMaxToolsBytes in all.
std::optional<ApiError> check_tools_size(const ordered_json& tools) {
  if (tools.size() > kMaxTools)
    return bad_request("'tools' lists " + std::to_string(tools.size()) + " tools; at most " + std::to_string(kMaxTools),
                       "tools");
  const size_t bytes = tools.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
  if (bytes > kMaxToolsBytes)
    return bad_request("'tools' is " + std::to_string(bytes) + " bytes as JSON; at most " + std::to_string(kMaxToolsBytes),
                       "tools");
  return std::nullopt;
}

// tools: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}].
std::optional<ApiError> read_tools(const ordered_json& tools, std::vector<Tool>& out) {
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || t.value("type", ordered_json()) != "function")
      return bad_request("'" + at + "' must be {\"type\": \"function\", \"function\": {...}}", at + ".type");
    for (const auto& [k, v] : t.items())
      if (k != "type" && k != "function" && !v.is_null())
        return bad_request("'" + at + "." + k + "' is not supported", at + "." + k, "unsupported_field");
    const auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) return bad_request("'" + at + ".function' must be an object", at + ".function");
    for (const auto& [k, v] : fn->items())
      if (k != "name" && k != "description" && k != "parameters" && k != "strict" && !v.is_null())
        return bad_request("'" + at + ".function." + k + "' is not supported", at + ".function." + k, "unsupported_field");
    Tool tool;
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || !valid_tool_name(name->get<std::string>()))
      return bad_request("'" + at + ".function.name' must be 1-64 letters, digits, '_', '-' or '.'", at + ".function.name");
    tool.name = name->get<std::string>();
    for (const Tool& other : out)
      if (other.name == tool.name) return bad_request("two tools are named '" + tool.name + "'", at + ".function.name");
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null()) {
      if (!d->is_string()) return bad_request("'" + at + ".function.description' must be a string", at + ".function.description");
      tool.description = d->get<std::string>();
    }
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
      if (!p->is_object()) return bad_request("'" + at + ".function.parameters' must be a JSON Schema object", at + ".function.parameters");
      tool.parameters = *p;
    }
    out.push_back(std::move(tool));
  }
  return std::nullopt;
}

// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}.
std::optional<ApiError> read_tool_choice(const ordered_json& tc, const std::vector<Tool>& tools, ToolChoice& out) {
  using Mode = ToolChoice::Mode;
  if (tc.is_string()) {
    const std::string v = tc.get<std::string>();
    if (v == "none") out.mode = Mode::none;
    else if (v == "auto") out.mode = Mode::automatic;
    else if (v == "required") out.mode = Mode::required;
    else return bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or a function", "tool_choice");
  } else if (tc.is_object() && tc.value("type", ordered_json()) == "function" && tc.contains("function") &&
             tc["function"].is_object() && tc["function"].contains("name") && tc["function"]["name"].is_string()) {
    out.mode = Mode::named;
    out.name = tc["function"]["name"].get<std::string>();
    bool known = false;
    for (const Tool& t : tools) known = known || t.name == out.name;
    if (!known) return bad_request("'tool_choice' names '" + out.name + "', which is not in 'tools'", "tool_choice");
  } else {
    return bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}",
                       "tool_choice");
  }
  if (out.mode == Mode::required && tools.empty())
    return bad_request("'tool_choice' \"required\" needs 'tools'", "tool_choice");
  return std::nullopt;
}

// At most one of response_format, grammar and json_schema.
std::optional<ApiError> read_output_format(const ordered_json& doc, std::optional<OutputFormat>& out) {
  Fields f(doc);
  int given = 0;
  if (const ordered_json* rf = f.find("response_format")) {
    ++given;
    if (auto e = read_response_format(*rf, "response_format", false, out)) return e;
  }
  if (const ordered_json* g = f.find("grammar")) {
    ++given;
    if (!g->is_string() || g->get_ref<const std::string&>().empty())
      return bad_request("'grammar' must be a non-empty GBNF string", "grammar");
    out = OutputFormat{OutputFormat::Kind::gbnf, g->get<std::string>(), "grammar"};
  }
  if (const ordered_json* js = f.find("json_schema")) {
    ++given;
    if (!js->is_object() && !js->is_boolean()) return bad_request("'json_schema' must be a JSON Schema object", "json_schema");
    out = OutputFormat{OutputFormat::Kind::json_schema, js->dump(), "json_schema"};
  }
  if (given > 1) return bad_request("give at most one of 'response_format', 'grammar' and 'json_schema'", "grammar");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> read_response_format(const ordered_json& rf, const std::string& param, bool flat,
                                             std::optional<OutputFormat>& out) {
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    return bad_request("'" + param + "' must be an object with a string 'type'", param + ".type");
  const std::string type = rf["type"].get<std::string>();
  auto only = [&](const ordered_json& obj, std::initializer_list<std::string_view> keys,
                  const std::string& at) -> std::optional<ApiError> {
    for (const auto& [k, v] : obj.items()) {
      bool ok = v.is_null();
      for (auto key : keys) ok = ok || key == k;
      if (!ok) return bad_request("'" + at + "." + k + "' is not supported", at + "." + k, "unsupported_field");
    }
    return std::nullopt;
  };
  if (type == "text") {
    out.reset();
    return only(rf, {"type"}, param);
  }
  if (type == "json_object") {
    out = OutputFormat{OutputFormat::Kind::json_object, "", param};
    return only(rf, {"type"}, param);
  }
  if (type != "json_schema")
    return bad_request("'" + param + ".type' must be \"text\", \"json_object\" or \"json_schema\"", param + ".type");
  const std::initializer_list<std::string_view> schema_keys = {"name", "schema", "strict", "description"};
  const ordered_json* js = &rf;
  std::string at = param;
  if (flat) {
    if (auto e = only(rf, {"type", "name", "schema", "strict", "description"}, param)) return e;
  } else {
    if (auto e = only(rf, {"type", "json_schema"}, param)) return e;
    if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
      return bad_request("'" + param + ".json_schema' must be an object", param + ".json_schema");
    js = &rf["json_schema"];
    at = param + ".json_schema";
    if (auto e = only(*js, schema_keys, at)) return e;
  }
  if (js->contains("name") && !(*js)["name"].is_string()) return bad_request("'" + at + ".name' must be a string", at + ".name");
  if (js->contains("strict") && !(*js)["strict"].is_boolean() && !(*js)["strict"].is_null())
    return bad_request("'" + at + ".strict' must be a boolean", at + ".strict");
  if (!js->contains("schema") || (*js)["schema"].is_null()) {  // no schema: any JSON object
    out = OutputFormat{OutputFormat::Kind::json_object, "", at + ".schema"};
    return std::nullopt;
  }
  const ordered_json& schema = (*js)["schema"];
  if (!schema.is_object() && !schema.is_boolean()) return bad_request("'" + at + ".schema' must be an object", at + ".schema");
  out = OutputFormat{OutputFormat::Kind::json_schema, schema.dump(), at + ".schema"};
  return std::nullopt;
}

namespace {

// Fields common to both generation endpoints. `logprobs` differs between them and is read by the caller.
Parsed<GenerationRequest> read_generation(const ordered_json& doc) {
  GenerationRequest g;
  Fields f(doc);
  f.string("model", g.model);
  // 0 only scores the prompt (echo + logprobs, prompt_logprobs): checked by the endpoint.
  f.integer("max_tokens", g.max_tokens, 0, kI32Max);
  if (!g.max_tokens) f.integer("max_completion_tokens", g.max_tokens, 0, kI32Max);
  f.integer("prompt_logprobs", g.prompt_logprobs, 0, kMaxTopLogprobs);
  f.integer("min_tokens", g.min_tokens, 0, kI32Max);
  f.number("temperature", g.sampling.temperature, 0.0, 2.0);
  f.number("top_p", g.sampling.top_p, 0.0, 1.0, /*lo_open=*/true);
  int32_t top_k = 0;
  f.integer("top_k", top_k, -1, kI32Max);
  g.sampling.top_k = top_k < 0 ? 0 : top_k;
  f.number("min_p", g.sampling.min_p, 0.0, 1.0);
  f.number("presence_penalty", g.sampling.presence_penalty, -2.0, 2.0);
  f.number("frequency_penalty", g.sampling.frequency_penalty, -2.0, 2.0);
  f.number("repetition_penalty", g.sampling.repetition_penalty, 0.0, 10.0, /*lo_open=*/true);
  // Any JSON integer is a seed; negative ones wrap to their two's complement, as OpenAI's int64 does.
  if (const ordered_json* s = f.find("seed"); s && !f.error) {
    if (!s->is_number_integer()) f.fail("seed", "'seed' must be an integer");
    else g.sampling.seed = s->is_number_unsigned() ? s->get<uint64_t>() : uint64_t(s->get<int64_t>());
  }
  read_stop(f, g.stop);
  if (const ordered_json* ids = f.find("stop_token_ids"); ids && !f.error) {
    if (auto e = read_ids(*ids, "stop_token_ids", g.stop_token_ids)) f.error = e;
  }
  f.integer("n", g.n, 1, kMaxChoices);
  f.boolean("stream", g.stream);
  if (const ordered_json* so = f.find("stream_options"); so && !f.error) {
    if (!so->is_object()) {
      f.fail("stream_options", "'stream_options' must be an object");
    } else if (!g.stream) {
      f.fail("stream_options", "'stream_options' is only allowed with \"stream\": true");
    } else {
      Fields sf(*so, "stream_options.");
      sf.boolean("include_usage", g.include_usage);
      if (sf.error) f.error = sf.error;
    }
  }
  read_logit_bias(f, g.logit_bias);
  f.boolean("ignore_eos", g.ignore_eos);
  f.boolean("speculative", g.speculative);
  f.string("cache_salt", g.cache_salt);
  f.string("user", g.user);
  f.integer("priority", g.priority, -1000000, 1000000);
  f.string("service_tier", g.service_tier);
  if (!f.error && !g.service_tier.empty() && !known_service_tier(g.service_tier))
    f.fail("service_tier", "'service_tier' must be one of auto, default, priority, interactive, flex, batch; got '" +
                               g.service_tier + "'");
  f.integer("ttft_deadline_ms", g.ttft_deadline_ms, 0, 3'600'000);
  if (f.error) return *f.error;
  if (auto e = read_output_format(doc, g.format)) return *e;
  if (g.max_tokens && g.min_tokens > *g.max_tokens)
    return bad_request("'min_tokens' (" + std::to_string(g.min_tokens) + ") must not exceed 'max_tokens' (" +
                           std::to_string(*g.max_tokens) + ")",
                       "min_tokens");
  return g;
}

// prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...]. Texts are moved out of `doc`.
std::optional<ApiError> read_prompts(ordered_json& doc, std::vector<PromptInput>& out, const std::string& key = "prompt") {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return bad_request("'" + key + "' is required", key);
  ordered_json& p = *it;
  const std::string shape = "'" + key + "' must be a string, an array of strings, an array of token ids or an array of "
                            "token-id arrays";
  if (p.is_string()) {
    out.push_back(PromptInput{.text = std::move(p.get_ref<std::string&>())});
    return std::nullopt;
  }
  if (!p.is_array() || p.empty()) return bad_request(p.is_array() ? "'" + key + "' must not be empty" : shape, key);
  if (p[0].is_number()) {
    PromptInput in{.is_ids = true};
    if (auto e = read_ids(p, key, in.ids)) return e;
    out.push_back(std::move(in));
    return std::nullopt;
  }
  for (auto& item : p) {
    if (item.is_string()) {
      out.push_back(PromptInput{.text = std::move(item.get_ref<std::string&>())});
    } else if (item.is_array()) {
      PromptInput in{.is_ids = true};
      if (auto e = read_ids(item, key, in.ids)) return e;
      out.push_back(std::move(in));
    } else {
      return bad_request(shape, key);
    }
  }
  return std::nullopt;
}

// Checks the conversation and normalizes each message's content to a string (text parts joined by
// newlines, as vLLM does), so every chat template sees the shape it expects. The messages are
// normalized in place and moved out of `doc`, not copied.
bool known_role(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" || role == "tool";
}

std::optional<ApiError> read_messages(ordered_json& doc, ordered_json& out) {
  auto it = doc.find("messages");
  if (it == doc.end() || it->is_null()) return bad_request("'messages' is required", "messages");
  if (!it->is_array()) return bad_request("'messages' must be an array", "messages");
  if (it->empty()) return bad_request("'messages' must not be empty", "messages");
  for (size_t i = 0; i < it->size(); ++i) {
    ordered_json& m = (*it)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad_request("'" + at + "' must be an object", at);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string() || role->get_ref<const std::string&>().empty())
      return bad_request("'" + at + ".role' must be a non-empty string", at + ".role");
    if (!known_role(role->get_ref<const std::string&>()))
      return bad_request("'" + at + ".role' is '" + role->get_ref<const std::string&>() +
                             "'; it must be system, developer, user, assistant or tool",
                         at + ".role");
    if (*role == "developer") *role = "system";  // OpenAI's newer name for it; templates know only system
    if (auto calls = m.find("tool_calls"); calls != m.end() && !calls->is_null()) {
      if (!calls->is_array() || !std::all_of(calls->begin(), calls->end(), [](const auto& c) { return c.is_object(); }))
        return bad_request("'" + at + ".tool_calls' must be an array of objects", at + ".tool_calls");
    }
    // OpenAI sends a call's arguments as JSON text; templates expect the object.
    if (auto calls = m.find("tool_calls"); calls != m.end() && calls->is_array()) {
      for (auto& call : *calls) {
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
        auto& fn = call["function"];
        if (auto a = fn.find("arguments"); a != fn.end() && a->is_string()) {
          auto parsed = ordered_json::parse(a->get_ref<const std::string&>(), nullptr, false);
          if (!parsed.is_discarded()) *a = std::move(parsed);
        }
      }
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // An assistant turn that only calls tools has no content; templates test for that.
      m["content"] = m.contains("tool_calls") ? ordered_json(nullptr) : ordered_json("");
    } else if (content->is_array()) {
      std::string text;
      for (size_t j = 0; j < content->size(); ++j) {
        const ordered_json& part = (*content)[j];
        const std::string pat = at + ".content[" + std::to_string(j) + "]";
        if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
          return bad_request("'" + pat + "' must be an object with a 'type'", pat);
        if (part["type"] != "text")
          return bad_request("content parts of type '" + part["type"].get<std::string>() +
                                 "' are not supported; only 'text'",
                             pat + ".type");
        if (!part.contains("text") || !part["text"].is_string())
          return bad_request("'" + pat + ".text' must be a string", pat + ".text");
        if (j) text += "\n";
        text += part["text"].get_ref<const std::string&>();
      }
      *content = std::move(text);
    } else if (!content->is_string()) {
      return bad_request("'" + at + ".content' must be a string, an array of text parts or null", at + ".content");
    }
  }
  out = std::move(*it);
  return std::nullopt;
}

}  // namespace

Parsed<CompletionRequest> parse_completion_request(std::string_view body) {
  auto doc = parse_json_object(body);
  if (!doc) return doc.error();
  return parse_completion_request(JsonBody{std::move(*doc)});
}

Parsed<CompletionRequest> parse_completion_request(JsonBody body) {
  ordered_json* doc = &body.doc;
  if (!doc->is_object()) return not_an_object();
  if (auto e = reject_unknown_fields(*doc, kCompletionFields)) return *e;
  auto gen = read_generation(*doc);
  if (!gen) return gen.error();
  CompletionRequest r{.gen = std::move(*gen)};
  if (auto e = read_prompts(*doc, r.prompts)) return *e;
  Fields f(*doc);
  f.integer("logprobs", r.gen.top_logprobs, 0, kMaxTopLogprobs);
  f.boolean("echo", r.echo);
  if (f.error) return *f.error;
  // Scoring as evaluators do it: echo + logprobs returns the prompt's logprobs too.
  if (r.echo && r.gen.top_logprobs >= 0) r.echo_logprobs = true;
  if (r.gen.max_tokens == 0 && !r.echo && r.gen.prompt_logprobs < 0)
    return bad_request("'max_tokens' 0 generates nothing; it needs \"echo\": true or 'prompt_logprobs'", "max_tokens");
  if (int64_t(r.prompts.size()) * r.gen.n > kMaxChoices)
    return bad_request("at most " + std::to_string(kMaxChoices) + " choices (prompts times n) per request", "n");
  return r;
}

Parsed<ChatRequest> parse_chat_request(std::string_view body) {
  auto doc = parse_json_object(body);
  if (!doc) return doc.error();
  return parse_chat_request(JsonBody{std::move(*doc)});
}

Parsed<ChatRequest> parse_chat_request(JsonBody body) {
  ordered_json* doc = &body.doc;
  if (!doc->is_object()) return not_an_object();
  if (auto e = reject_unknown_fields(*doc, kChatFields)) return *e;
  auto gen = read_generation(*doc);
  if (!gen) return gen.error();
  ChatRequest r{.gen = std::move(*gen)};
  if (auto e = read_messages(*doc, r.messages)) return *e;
  Fields f(*doc);
  bool logprobs = false;
  f.boolean("logprobs", logprobs);
  int32_t top = -1;
  f.integer("top_logprobs", top, 0, kMaxTopLogprobs);
  f.boolean("add_generation_prompt", r.add_generation_prompt);
  f.boolean("continue_final_message", r.continue_final_message);
  if (const ordered_json* t = f.find("tools"); t && !f.error) {
    if (!t->is_array()) f.fail("tools", "'tools' must be an array");
    else if (auto e = read_function_tools(*t, r.tool_list)) f.error = e;
    else if (!t->empty()) r.tools = take(*doc, "tools");
  }
  f.boolean("parallel_tool_calls", r.parallel_tool_calls);
  if (const ordered_json* tc = f.find("tool_choice"); tc && !f.error) {
    if (auto e = read_tool_choice(*tc, r.tool_list, r.tool_choice)) f.error = e;
  }
  r.chat_template_kwargs = ordered_json::object();
  if (const ordered_json* k = f.find("chat_template_kwargs"); k && !f.error) {
    if (!k->is_object()) f.fail("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    else r.chat_template_kwargs = take(*doc, "chat_template_kwargs");
  }
  if (f.error) return *f.error;
  if (top >= 0 && !logprobs)
    return bad_request("'top_logprobs' requires \"logprobs\": true", "top_logprobs");
  if (r.gen.max_tokens == 0 && r.gen.prompt_logprobs < 0)
    return bad_request("'max_tokens' 0 generates nothing; it needs 'prompt_logprobs'", "max_tokens");
  r.gen.top_logprobs = logprobs ? std::max(top, 0) : -1;
  if (r.continue_final_message && r.add_generation_prompt)
    return bad_request("'continue_final_message' needs \"add_generation_prompt\": false", "continue_final_message");
  return r;
}

Parsed<EmbeddingRequest> parse_embedding_request(std::string_view body) {
  auto doc = parse_json_object(body);
  if (!doc) return doc.error();
  return parse_embedding_request(JsonBody{std::move(*doc)});
}

Parsed<EmbeddingRequest> parse_embedding_request(JsonBody body) {
  ordered_json* doc = &body.doc;
  if (!doc->is_object()) return not_an_object();
  constexpr std::string_view kFields[] = {"input", "model", "encoding_format", "dimensions", "user"};
  for (const auto& [key, value] : doc->items()) {
    if (value.is_null() || std::find(std::begin(kFields), std::end(kFields), key) != std::end(kFields)) continue;
    return bad_request("'" + key + "' is not supported by this server (see docs/API.md for the supported fields)", key,
                       "unsupported_field");
  }
  EmbeddingRequest r;
  if (auto e = read_prompts(*doc, r.inputs, "input")) return *e;
  if (r.inputs.size() > kMaxEmbeddingInputs)
    return bad_request("at most " + std::to_string(kMaxEmbeddingInputs) + " inputs per request", "input");
  for (size_t i = 0; i < r.inputs.size(); ++i)
    if (r.inputs[i].is_ids ? r.inputs[i].ids.empty() : r.inputs[i].text.empty())
      return bad_request("'input' must not contain an empty " + std::string(r.inputs[i].is_ids ? "token list" : "string") +
                             " (item " + std::to_string(i) + ")",
                         "input");
  Fields f(*doc);
  f.string("model", r.model);
  f.string("user", r.user);
  std::string format = "float";
  f.string("encoding_format", format);
  f.integer("dimensions", r.dimensions, 1, kI32Max);
  if (f.error) return *f.error;
  if (format != "float" && format != "base64")
    return bad_request("'encoding_format' must be \"float\" or \"base64\"", "encoding_format");
  r.base64 = format == "base64";
  return r;
}

Parsed<TokenizeRequest> parse_tokenize_request(std::string_view body) {
  auto doc = parse_json_object(body);
  if (!doc) return doc.error();
  return parse_tokenize_request(JsonBody{std::move(*doc)});
}

Parsed<TokenizeRequest> parse_tokenize_request(JsonBody body) {
  ordered_json* doc = &body.doc;
  if (!doc->is_object()) return not_an_object();
  TokenizeRequest r;
  Fields f(*doc);
  f.string("model", r.model);
  f.boolean("add_special_tokens", r.add_special_tokens);
  f.boolean("add_generation_prompt", r.add_generation_prompt);
  f.boolean("return_token_strs", r.return_token_strs);
  if (f.error) return *f.error;
  if (doc->contains("messages") && !(*doc)["messages"].is_null()) {
    r.is_chat = true;
    // Chat prompts carry their special tokens in the template already.
    if (!doc->contains("add_special_tokens")) r.add_special_tokens = false;
    if (auto e = read_messages(*doc, r.messages)) return *e;
    return r;
  }
  f.string("prompt", r.prompt);
  if (f.error) return *f.error;
  if (!f.find("prompt")) return bad_request("'prompt' or 'messages' is required", "prompt");
  return r;
}

Parsed<DetokenizeRequest> parse_detokenize_request(std::string_view body) {
  auto doc = parse_json_object(body);
  if (!doc) return doc.error();
  return parse_detokenize_request(JsonBody{std::move(*doc)});
}

Parsed<DetokenizeRequest> parse_detokenize_request(JsonBody body) {
  ordered_json* doc = &body.doc;
  if (!doc->is_object()) return not_an_object();
  DetokenizeRequest r;
  Fields f(*doc);
  f.string("model", r.model);
  if (f.error) return *f.error;
  const ordered_json* t = f.find("tokens");
  if (!t) return bad_request("'tokens' is required", "tokens");
  if (auto e = read_ids(*t, "tokens", r.tokens)) return *e;
  return r;
}

std::optional<ApiError> read_function_tools(const ordered_json& tools, std::vector<Tool>& out) {
  if (!tools.is_array()) return bad_request("'tools' must be an array", "tools");
  if (auto e = check_tools_size(tools)) return e;
  return read_tools(tools, out);
}

std::optional<ApiError> read_function_tool_choice(const ordered_json& choice, const std::vector<Tool>& tools,
                                                  ToolChoice& out) {
  return read_tool_choice(choice, tools, out);
}

}  // namespace kvasir::server
