// POST /v1/embeddings (OpenAI) and Ollama's /api/embed and /api/embeddings: each input one
// prefill-only engine request with the backend's pooling, batched by the scheduler like any other;
// the result is the pooled final hidden state, L2-normalized. /v1/rerank (and llama-server's
// /rerank) and vLLM's /v1/score rank texts by the cosine similarity of those embeddings.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <initializer_list>

#include "server/admission.h"
#include "server/cross_encoder.h"
#include "server/generation.h"
#include "server/http_util.h"
#include "server/ollama_protocol.h"
#include "server/protocol.h"
#include "server/routes.h"

namespace kvasir::server {

std::optional<ApiError> run_to_end(ServerState& st, Backend& b, const http::Request& req,
                                   std::vector<engine::GenerationParams> params, std::vector<int32_t> prompt_of,
                                   const std::function<std::optional<ApiError>(int32_t, engine::Delta&)>& on_delta) {
  auto guard = std::make_shared<ActiveGuard>(st);
  auto job = GenerationJob::submit(*b.engine, st.metrics, std::move(params), std::move(prompt_of));
  if (!job) return job.error();
  int32_t choice = 0;
  engine::Delta d;
  for (;;) {
    if (req.client_gone()) {
      (*job)->abort_all();
      return ApiError{.status = 499, .message = "the client went away"};
    }
    if (!(*job)->wait_ready(std::chrono::milliseconds(100))) continue;
    if (!(*job)->next(choice, d)) return std::nullopt;
    if (auto e = on_delta(choice, d)) {
      (*job)->abort_all();
      return e;
    }
  }
}

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
  GenerationRequest tenancy;  // the key's tenant, class and deadline
  apply_tenancy(st.options.slo, req, tenancy);
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
    p.cache_salt = tenancy.cache_salt;
    set_slo(p, tenancy.slo);
    params.push_back(std::move(p));
    prompt_of.push_back(int32_t(i));
  }
  Embedded out;
  out.vectors.resize(inputs.size());
  auto e = run_to_end(st, b, req, std::move(params), std::move(prompt_of), [&](int32_t choice, engine::Delta& d) -> std::optional<ApiError> {
    if (d.finish == engine::FinishReason::None) return std::nullopt;
    if (d.embedding.empty())
      return ApiError{.status = 503, .message = "the embedding request was aborted", .type = "server_error"};
    out.vectors[size_t(choice)] = std::move(d.embedding);
    out.prompt_tokens += d.usage.prompt_tokens;
    return std::nullopt;
  });
  if (e) return *e;
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

// A list of texts from `value` (a string, or strings, or {"text": string} objects where
// `objects`), at least one, each non-empty; errors name `param`.
Parsed<std::vector<PromptInput>> texts(const ordered_json* value, const std::string& param, bool objects) {
  std::vector<PromptInput> out;
  auto bad = [&] {
    return bad_request("'" + param + "' must be a non-empty string or a non-empty array of them" +
                           (objects ? " (or of {\"text\": string})" : ""),
                       param);
  };
  if (!value) return bad();
  if (value->is_string()) {
    out.push_back({.text = value->get<std::string>()});
  } else if (value->is_array() && !value->empty()) {
    for (const auto& x : *value) {
      if (x.is_string()) out.push_back({.text = x.get<std::string>()});
      else if (objects && x.is_object() && x.contains("text") && x["text"].is_string()) out.push_back({.text = x["text"].get<std::string>()});
      else return bad();
    }
  } else {
    return bad();
  }
  if (out.size() > kMaxEmbeddingInputs - 1)
    return bad_request("'" + param + "' lists " + std::to_string(out.size()) + " texts; at most " +
                           std::to_string(kMaxEmbeddingInputs - 1),
                       param);
  for (const PromptInput& t : out)
    if (t.text.empty()) return bad();
  return out;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {  // both unit length
  double dot = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) dot += double(a[i]) * double(b[i]);
  return dot;
}


// {"query", "documents": [string | {"text"}], "top_n", "return_documents"} -> results by relevance.
void handle_rerank(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  const ordered_json& doc = json_body(req).doc;
  if (auto e = only_fields(doc, {"model", "query", "documents", "top_n", "return_documents"})) return send_error(res, *e);
  if (doc.contains("model") && !doc["model"].is_null()) {
    if (!doc["model"].is_string()) return send_error(res, bad_request("'model' must be a string", "model"));
    if (auto e = check_model(doc["model"].get<std::string>(), st)) return send_error(res, *e);
  }
  const auto q = doc.find("query");
  if (q == doc.end() || !q->is_string() || q->get_ref<const std::string&>().empty())
    return send_error(res, bad_request("'query' must be a non-empty string", "query"));
  const auto d = doc.find("documents");
  auto documents = texts(d == doc.end() || !d->is_array() ? nullptr : &*d, "documents", true);
  if (!documents) return send_error(res, documents.error());
  int64_t top_n = int64_t(documents->size());
  if (auto t = doc.find("top_n"); t != doc.end() && !t->is_null()) {
    if (!t->is_number_integer() || t->get<int64_t>() < 1) return send_error(res, bad_request("'top_n' must be an integer >= 1", "top_n"));
    top_n = std::min(top_n, t->get<int64_t>());
  }
  bool return_documents = false;
  if (auto r = doc.find("return_documents"); r != doc.end() && !r->is_null()) {
    if (!r->is_boolean()) return send_error(res, bad_request("'return_documents' must be a boolean", "return_documents"));
    return_documents = r->get<bool>();
  }
  std::vector<std::pair<double, size_t>> ranked;
  int64_t prompt_tokens = 0;
  if (st.options.rerank_generative) {
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const PromptInput& t : *documents) pairs.push_back({q->get<std::string>(), t.text});
    auto judged = judge_pairs(st, *b, req, pairs, "documents");
    if (!judged) return send_error(res, judged.error());
    for (size_t i = 0; i < judged->scores.size(); ++i) ranked.push_back({judged->scores[i], i});
    prompt_tokens = judged->prompt_tokens;
  } else {
    std::vector<PromptInput> inputs{{.text = q->get<std::string>()}};
    for (const PromptInput& t : *documents) inputs.push_back(t);
    auto got = embed(st, *b, req, std::move(inputs), /*truncate=*/true, "documents");
    if (!got) return send_error(res, got.error());
    for (size_t i = 1; i < got->vectors.size(); ++i) ranked.push_back({cosine(got->vectors[0], got->vectors[i]), i - 1});
    prompt_tokens = got->prompt_tokens;
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  ordered_json results = ordered_json::array();
  for (int64_t k = 0; k < top_n; ++k) {
    const auto& [score, index] = ranked[size_t(k)];
    ordered_json r{{"index", index}, {"relevance_score", score}};
    if (return_documents) r["document"] = {{"text", (*documents)[index].text}};
    results.push_back(std::move(r));
  }
  send_json(res, 200, ordered_json{{"id", "rerank-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())},
                                   {"model", st.options.served_model_name},
                                   {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}},
                                   {"results", std::move(results)}});
}

// vLLM's {"text_1", "text_2"}: one text against each of a list, or two lists pair by pair.
void handle_score(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  const ordered_json& doc = json_body(req).doc;
  if (auto e = only_fields(doc, {"model", "text_1", "text_2"}))
    return send_error(res, *e);
  if (doc.contains("model") && !doc["model"].is_null()) {
    if (!doc["model"].is_string()) return send_error(res, bad_request("'model' must be a string", "model"));
    if (auto e = check_model(doc["model"].get<std::string>(), st)) return send_error(res, *e);
  }
  auto field = [&](const char* k) { auto it = doc.find(k); return it == doc.end() ? nullptr : &*it; };
  auto left = texts(field("text_1"), "text_1", false);
  if (!left) return send_error(res, left.error());
  auto right = texts(field("text_2"), "text_2", false);
  if (!right) return send_error(res, right.error());
  if (left->size() != 1 && left->size() != right->size())
    return send_error(res, bad_request("'text_1' must be one text, or as many as 'text_2'", "text_1"));
  const size_t n_left = left->size();
  if (st.options.rerank_generative) {
    std::vector<std::pair<std::string, std::string>> pairs;
    for (size_t i = 0; i < right->size(); ++i) pairs.push_back({(*left)[n_left == 1 ? 0 : i].text, (*right)[i].text});
    auto judged = judge_pairs(st, *b, req, pairs, "text_2");
    if (!judged) return send_error(res, judged.error());
    ordered_json data = ordered_json::array();
    for (size_t i = 0; i < judged->scores.size(); ++i)
      data.push_back({{"index", i}, {"object", "score"}, {"score", judged->scores[i]}});
    return send_json(res, 200, ordered_json{{"id", "score-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())},
                                            {"object", "list"},
                                            {"created", int64_t(std::time(nullptr))},
                                            {"model", st.options.served_model_name},
                                            {"data", std::move(data)},
                                            {"usage", {{"prompt_tokens", judged->prompt_tokens}, {"total_tokens", judged->prompt_tokens}}}});
  }
  std::vector<PromptInput> inputs = std::move(*left);
  for (PromptInput& t : *right) inputs.push_back(std::move(t));
  auto got = embed(st, *b, req, std::move(inputs), /*truncate=*/true, "text_2");
  if (!got) return send_error(res, got.error());
  ordered_json data = ordered_json::array();
  for (size_t i = 0; i < got->vectors.size() - n_left; ++i)
    data.push_back({{"index", i}, {"object", "score"},
                    {"score", cosine(got->vectors[n_left == 1 ? 0 : i], got->vectors[n_left + i])}});
  send_json(res, 200, ordered_json{{"id", "score-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())},
                                   {"object", "list"},
                                   {"created", int64_t(std::time(nullptr))},
                                   {"model", st.options.served_model_name},
                                   {"data", std::move(data)},
                                   {"usage", {{"prompt_tokens", got->prompt_tokens}, {"total_tokens", got->prompt_tokens}}}});
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
  for (const char* path : {"/v1/rerank", "/rerank"})
    router.add("POST", path, [&st](const http::Request& req, http::Response& res) { handle_rerank(st, req, res); }, json_post);
  router.add("POST", "/v1/score", [&st](const http::Request& req, http::Response& res) { handle_score(st, req, res); },
             json_post);
}

}  // namespace kvasir::server
