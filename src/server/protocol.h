// The OpenAI-compatible wire protocol: request bodies are parsed and validated here, once, into
// typed structs; handlers never see raw JSON. Pure functions, no engine, no I/O.
//
// Rules: an unknown field is a 400 naming it (code unsupported_field); a JSON null counts as "not given";
// a field of the wrong type or out of range is a 400 with an OpenAI-style error naming the field.
// Integers must be JSON integers (10.0 is not an integer); numbers may be integers or floats.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/lora.h"
#include "server/tool_calls.h"

namespace kvasir::server {

using ordered_json = nlohmann::ordered_json;

// {"error": {"message", "type", "param", "code"}} with an HTTP status. Empty param/code print as null.
// A request's SLO as the server resolved it (server/slo.h).
struct RequestSlo {
  bool batch = false;
  std::string tenant;           // fair-share unit and metrics label; empty: the one shared tenant
  double weight = 1.0;
  double ttft_deadline_ms = 0;  // 0: none
};

struct ApiError {
  int status = 400;
  std::string message = {};
  std::string type = "invalid_request_error";
  std::string param = {};
  std::string code = {};
  int64_t retry_after_s = 0;  // 429: sent as Retry-After when > 0
};

ApiError bad_request(std::string message, std::string param = {}, std::string code = {});
// service_tier values: OpenAI's (auto, default, priority, flex) and kvasir's (interactive, batch).
bool known_service_tier(const std::string& tier);
ordered_json error_json(const ApiError& error);
std::string error_body(const ApiError& error);

// A parsed value or the error that explains why there is none.
template <typename T>
class Parsed {
 public:
  Parsed(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Parsed(ApiError error) : v_(std::move(error)) {}  // NOLINT
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T* operator->() { return &value(); }
  T& operator*() { return value(); }
  const ApiError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, ApiError> v_;
};

// Sampling knobs with OpenAI's defaults (not the CLI's llama.cpp-style ones): temperature 1,
// top_p 1, top_k and min_p off, no penalties.
struct SamplingRequest {
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0 (or -1 on the wire): off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;  // absent: a random seed per request
};

// Constrained output: response_format json_object / json_schema, or the llama.cpp extensions
// `grammar` (GBNF text) and `json_schema` (a schema object). Compiled against the vocabulary by
// the handler (a schema error is a 400 naming `param`).
struct OutputFormat {
  enum class Kind { gbnf, json_schema, json_object };
  Kind kind = Kind::json_object;
  std::string text;   // GBNF, or the schema as JSON text
  std::string param;  // the field it came from
};

// {"type": "text"} (nothing), {"type": "json_object"}, or {"type": "json_schema", "json_schema":
// {"name", "schema", "strict", "description"}}; `flat`: the Responses API's shape, whose
// json_schema fields sit beside "type".
std::optional<ApiError> read_response_format(const ordered_json& rf, const std::string& param, bool flat,
                                             std::optional<OutputFormat>& out);

// `tools` of any API that takes OpenAI's function tools ([{"type": "function", "function": {name,
// description, parameters}}]): bounded in count and size, each name and schema checked.
std::optional<ApiError> read_function_tools(const ordered_json& tools, std::vector<Tool>& out);
// `tool_choice`: "none", "auto", "required" or {"type": "function", "function": {"name"}} (a name in `tools`).
std::optional<ApiError> read_function_tool_choice(const ordered_json& choice, const std::vector<Tool>& tools,
                                                  ToolChoice& out);

// Fields shared by /v1/completions and /v1/chat/completions.
struct GenerationRequest {
  std::string model;                 // empty: the served model
  std::shared_ptr<const LoraAdapter> adapter;  // the LoRA adapter `model` names (select_model); null: the base
  std::optional<int32_t> max_tokens; // absent: the endpoint's default
  int32_t min_tokens = 0;
  SamplingRequest sampling;
  std::vector<std::string> stop;     // non-empty strings
  std::vector<int32_t> stop_token_ids;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  int32_t top_logprobs = -1;         // -1: no logprobs; k >= 0: chosen token + k alternatives
  int32_t prompt_logprobs = -1;      // vLLM's: -1 none; k >= 0: every prompt token's logprob + k alternatives
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias), ids not yet checked against a vocabulary
  bool ignore_eos = false;
  std::string cache_salt;
  std::string user;
  int32_t priority = 0;
  // Serving under SLOs (server/slo.h): "flex" or "batch" is batch work, anything else interactive;
  // empty: the API key's tier. ttft_deadline_ms overrides the key's and the server's (0: none).
  std::string service_tier;
  std::optional<int64_t> ttft_deadline_ms;
  RequestSlo slo;                    // resolved by the route (server/slo.h apply_tenancy)
  bool speculative = true;           // extension: false opts out of speculative decoding
  std::optional<OutputFormat> format;  // constrained output; absent: free text
};

// One prompt of a completion request: text to tokenize, or token ids as given.
struct PromptInput {
  std::string text = {};
  std::vector<int32_t> ids = {};
  bool is_ids = false;
};

struct CompletionRequest {
  GenerationRequest gen;
  std::vector<PromptInput> prompts = {};  // a batch of prompts gives prompts.size() * n choices
  bool echo = false;
  bool echo_logprobs = false;  // echo + logprobs: the logprobs list starts with the prompt's tokens
};

struct EmbeddingRequest {
  std::string model;
  std::vector<PromptInput> inputs = {};  // "input": a string, strings, token ids or token-id arrays
  bool base64 = false;                   // encoding_format "base64": little-endian float32, base64
  std::optional<int32_t> dimensions;     // must equal the model's width (no Matryoshka truncation)
  std::string user;
};

struct ChatRequest {
  GenerationRequest gen;
  ordered_json messages = {};        // array of {role, content: string|null, ...}; text parts joined
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  ordered_json tools = nullptr;      // null when none; as given, for the template
  std::vector<Tool> tool_list;       // the same, checked: {"type": "function", "function": {name, description, parameters}}
  ToolChoice tool_choice;            // "auto" (default), "none", "required" or a named function
  bool parallel_tool_calls = true;
  ordered_json chat_template_kwargs = {};  // object of extra template variables
};

struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;                // when !is_chat
  ordered_json messages;             // when is_chat
  bool add_generation_prompt = true;
  bool add_special_tokens = true;
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;
};

// Limits that are protocol facts rather than engine facts.
inline constexpr int32_t kMaxChoices = 64;        // n (times the number of prompts)
inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopBytes = 4096;        // all stop strings together (each choice keeps its own matcher)
inline constexpr size_t kMaxTools = 128;             // OpenAI's own limit
inline constexpr size_t kMaxToolsBytes = 256u << 10;  // `tools` as JSON text, checked before any tool is read
// Arrays and objects nested deeper than this anywhere in a body are a 400 (json_too_deep) before
// the body is parsed: copying, dumping and templating a JSON value recurse once per level, so a
// small body nested 100,000 deep would overflow the stack. Real requests (tool schemas included)
// stay far below it.
inline constexpr size_t kMaxJsonDepth = 64;

// Objects with more members than this anywhere in a body are a 400 (json_object_too_large) before
// the body is parsed: the parser keeps an object's members in order and looks each new key up
// among the ones before it, so one object of 100,000 keys costs seconds. A schema's `properties`
// or `$defs` stay far below it.
inline constexpr size_t kMaxJsonObjectMembers = 10000;

// How deeply arrays and objects nest in `json` (0 for a scalar, 1 for "{}"), brackets inside
// strings not counted; the scan stops as soon as it reaches `stop_at`. Linear, no parsing: text
// that is not JSON gets some depth and is left to the parser to reject.
size_t json_nesting_depth(std::string_view json, size_t stop_at = SIZE_MAX);

// The largest member count of any object in `json` (its commas + 1, those inside strings and
// nested values not counted; an object of one member or none counts 0); the scan stops as soon as it reaches `stop_at` or nests past kMaxJsonDepth. Linear, no parsing.
size_t json_max_object_members(std::string_view json, size_t stop_at = SIZE_MAX);

// A request body as a JSON object: 400 invalid_json / json_too_deep / json_object_too_large otherwise.
Parsed<ordered_json> parse_json_object(std::string_view body);

// A body already parsed into a JSON object (by admission, server/admission.h). Each parser takes
// one, or the body's text, which it parses first with parse_json_object().
struct JsonBody {
  ordered_json doc;
};

Parsed<CompletionRequest> parse_completion_request(JsonBody body);
Parsed<CompletionRequest> parse_completion_request(std::string_view body);
Parsed<ChatRequest> parse_chat_request(JsonBody body);
Parsed<ChatRequest> parse_chat_request(std::string_view body);
// POST /v1/embeddings: at most kMaxEmbeddingInputs inputs, none empty.
inline constexpr size_t kMaxEmbeddingInputs = 2048;
Parsed<EmbeddingRequest> parse_embedding_request(JsonBody body);
Parsed<EmbeddingRequest> parse_embedding_request(std::string_view body);
Parsed<TokenizeRequest> parse_tokenize_request(JsonBody body);
Parsed<TokenizeRequest> parse_tokenize_request(std::string_view body);
Parsed<DetokenizeRequest> parse_detokenize_request(JsonBody body);
Parsed<DetokenizeRequest> parse_detokenize_request(std::string_view body);

}  // namespace kvasir::server
