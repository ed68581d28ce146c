// POST /v1/embeddings (OpenAI) and Ollama's /api/embed and /api/embeddings: each input one
// prefill-only engine request with the backend's pooling, batched by the scheduler like any other;
// the result is the pooled final hidden state, L2-normalized.
#include <algorithm>
#include <chrono>

#include "server/admission.h"
#include "server/generation.h"
#include "server/http_util.h"
#include "server/ollama_protocol.h"
#include "server/protocol.h"
#include "server/routes.h"

namespace kvasir::server {

namespace {

std::string base64_of(const std::vector<float>& v) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* bytes = reinterpret_cast<const uint8_t*>(v.data());  // little-endian float32, as OpenAI's
  const size_t n = v.size() * sizeof(float);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b = uint32_t(bytes[i]) << 16 | (i + 1 < n ? uint32_t(bytes[i + 1]) << 8 : 0) | (i + 2 < n ? bytes[i + 2] : 0);
    out += kAlphabet[b >> 18 & 63];
    out += kAlphabet[b >> 12 & 63];
    out += i + 1 < n ? kAlphabet[b >> 6 & 63] : '=';
    out += i + 2 < n ? kAlphabet[b & 63] : '=';
  }
  return out;
}

struct Embedded {
  std::vector<std::vector<float>> vectors;  // per input, in order
  int64_t prompt_tokens = 0;
};

// Tokenizes the inputs (BOS as the vocabulary adds it), checks them against the context (cut to it
// when `truncate`, else a 400 naming `param`), runs them and waits for every vector; a client
// that hangs up aborts them.
Parsed<Embedded> embed(ServerState& st, Backend& b, const http::Request& req, std::vector<PromptInput> inputs,
                       bool truncate, const std::string& param) {
  if (b.pooling.pooling == engine::Pooling::none)
    return bad_request("this model serves no embeddings: " + b.pooling.origin + " (start the server with --pooling)", param);
  std::vector<engine::GenerationParams> params;
  std::vector<int32_t> prompt_of;
  const size_t limit = size_t(b.max_model_len - 1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    PromptInput& in = inputs[i];
    if (!in.is_ids && !truncate)
      if (auto e = check_text_length(in.text.size(), *b.tokenizer, b.max_model_len, Endpoint::completions)) {
        e->param = param;
        return *e;
      }
    engine::GenerationParams p;
    p.prompt = in.is_ids ? std::move(in.ids) : b.tokenizer->encode(in.text);
    for (int32_t id : p.prompt)
      if (!b.tokenizer->valid_id(id)) return bad_request("token id " + std::to_string(id) + " is outside the vocabulary", param);
    if (p.prompt.empty()) return bad_request("input " + std::to_string(i) + " tokenizes to no tokens", param);
    if (p.prompt.size() > limit) {
      if (!truncate)
        return bad_request("input " + std::to_string(i) + " has " + std::to_string(p.prompt.size()) +
                               " tokens; this model's maximum context length is " + std::to_string(b.max_model_len) +
                               " tokens",
                           param, "context_length_exceeded");
      p.prompt.resize(limit);
    }
    p.stop.max_tokens = 0;
    p.pooling = b.pooling.pooling;
    p.cache_salt = tenant_salt(req, "");
    params.push_back(std::move(p));
    prompt_of.push_back(int32_t(i));
  }
  auto guard = std::make_shared<ActiveGuard>(st);
  auto job = GenerationJob::submit(*b.engine, st.metrics, std::move(params), std::move(prompt_of));
  if (!job) return job.error();
  Embedded out;
  out.vectors.resize(inputs.size());
  int32_t choice = 0;
  engine::Delta d;
  for (;;) {
    if (req.client_gone()) {
      (*job)->abort_all();
      return ApiError{.status = 499, .message = "the client went away"};
    }
    if (!(*job)->wait_ready(std::chrono::milliseconds(100))) continue;
    if (!(*job)->next(choice, d)) break;
    if (d.finish == engine::FinishReason::None) continue;
    if (d.embedding.empty())
      return ApiError{.status = 503, .message = "the embedding request was aborted", .type = "server_error"};
    out.vectors[size_t(choice)] = std::move(d.embedding);
    out.prompt_tokens += d.usage.prompt_tokens;
  }
  return out;
}

void handle_embeddings(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  auto r = parse_embedding_request(json_body(req));
  if (!r) return send_error(res, r.error());
  if (auto e = check_model(r->model, st)) return send_error(res, *e);
  const int64_t width = b->model->config().n_embd;
  if (r->dimensions && *r->dimensions != width)
    return send_error(res, bad_request("this model's embeddings have " + std::to_string(width) +
                                           " dimensions and cannot be shortened (it is not trained for it)",
                                       "dimensions"));
  auto got = embed(st, *b, req, std::move(r->inputs), /*truncate=*/false, "input");
  if (!got) return send_error(res, got.error());
  ordered_json data = ordered_json::array();
  for (size_t i = 0; i < got->vectors.size(); ++i) {
    ordered_json item{{"object", "embedding"}, {"index", i}};
    if (r->base64) item["embedding"] = base64_of(got->vectors[i]);
    else item["embedding"] = got->vectors[i];
    data.push_back(std::move(item));
  }
  send_json(res, 200,
            ordered_json{{"object", "list"},
                         {"data", std::move(data)},
                         {"model", st.options.served_model_name},
                         {"usage", {{"prompt_tokens", got->prompt_tokens}, {"total_tokens", got->prompt_tokens}}}});
}

// Ollama: /api/embed {"model", "input": text | [text], "truncate" (default true), "dimensions",
// "options", "keep_alive"} -> {"model", "embeddings", durations, "prompt_eval_count"}; the legacy
// /api/embeddings {"model", "prompt"} -> {"embedding"}.
void handle_ollama_embed(ServerState& st, const http::Request& req, http::Response& res, bool legacy) {
  auto fail = [&](const ApiError& e) { send_json(res, e.status, ordered_json{{"error", e.message}}); };
  Backend* b = st.backend();
  if (!b || st.phase() != Phase::ready) return fail(ApiError{.status = 503, .message = "the model is not ready"});
  const auto t0 = std::chrono::steady_clock::now();
  ordered_json doc = json_body(req).doc;
  if (!doc.is_object()) return fail(bad_request("the body must be a JSON object", ""));
  const char* key = legacy ? "prompt" : "input";
  for (const auto& [k, v] : doc.items()) {
    const bool known = k == key || k == "model" || k == "options" || k == "keep_alive" || (!legacy && k == "truncate") ||
                       (!legacy && k == "dimensions");
    if (!known && !v.is_null()) return fail(bad_request("'" + k + "' is not supported", k));
  }
  if (auto o = doc.find("options"); o != doc.end() && !o->is_null()) {
    if (!o->is_object()) return fail(bad_request("'options' must be an object", "options"));
    if (auto e = ollama::check_options(*o)) return fail(*e);
  }
  if (doc.contains("model") && doc["model"].is_string() && !ollama::same_model(doc["model"].get<std::string>(), st.options.served_model_name))
    return fail(ApiError{.status = 404, .message = "model '" + doc["model"].get<std::string>() + "' not found"});
  std::vector<PromptInput> inputs;
  static const ordered_json kAbsent;
  const auto found = doc.find(key);
  const ordered_json& in = found != doc.end() ? *found : kAbsent;  // a reference: client values are never copied
  if (in.is_string()) inputs.push_back({.text = in.get<std::string>()});
  else if (in.is_array() && !in.empty() && std::all_of(in.begin(), in.end(), [](const auto& x) { return x.is_string(); }))
    for (const auto& x : in) inputs.push_back({.text = x.get<std::string>()});
  else return fail(bad_request(std::string("'") + key + "' must be a string" + (legacy ? "" : " or an array of strings"), key));
  if (inputs.size() > kMaxEmbeddingInputs) return fail(bad_request("too many inputs", key));
  for (const auto& i : inputs)
    if (i.text.empty()) return fail(bad_request(std::string("'") + key + "' must not be empty", key));
  if (doc.contains("dimensions") && !(doc["dimensions"].is_number_integer() && doc["dimensions"].get<int64_t>() == b->model->config().n_embd))
    return fail(bad_request("'dimensions' must equal the model's width, " + std::to_string(b->model->config().n_embd), "dimensions"));
  const bool truncate = !doc.contains("truncate") || !doc["truncate"].is_boolean() || doc["truncate"].get<bool>();
  auto got = embed(st, *b, req, std::move(inputs), truncate, key);
  if (!got) return fail(got.error());
  if (legacy) return send_json(res, 200, ordered_json{{"embedding", got->vectors[0]}});
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  send_json(res, 200, ordered_json{{"model", st.options.served_model_name + ":latest"},
                                   {"embeddings", got->vectors},
                                   {"total_duration", ns},
                                   {"load_duration", 0},
                                   {"prompt_eval_count", got->prompt_tokens}});
}

}  // namespace

void register_embedding_routes(http::Router& router, ServerState& st) {
  const http::RouteOptions json_post{.run = http::Run::worker, .json_body = true};
  router.add("POST", "/v1/embeddings", [&st](const http::Request& req, http::Response& res) {
    handle_embeddings(st, req, res);
  }, json_post);
  router.add("POST", "/api/embed", [&st](const http::Request& req, http::Response& res) {
    handle_ollama_embed(st, req, res, false);
  }, json_post);
  router.add("POST", "/api/embeddings", [&st](const http::Request& req, http::Response& res) {
    handle_ollama_embed(st, req, res, true);
  }, json_post);
}

}  // namespace kvasir::server
