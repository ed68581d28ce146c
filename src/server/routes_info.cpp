// Everything but generation: the web page, health, metrics, the model list and the tokenizer.
#include "server/admission.h"
#include "server/http_util.h"
#include "server/responses.h"
#include "server/routes.h"
#include "server/web_ui.h"

namespace kvasir::server {

Backend* serving_backend(ServerState& st, http::Response& res) {
  switch (st.phase()) {
    case Phase::ready: return st.backend();
    case Phase::loading:
      send_error(res, ApiError{.status = 503, .message = "the model is still loading", .type = "server_error",
                               .code = "model_loading"});
      return nullptr;
    case Phase::draining:
      send_error(res, ApiError{.status = 503, .message = "the server is shutting down", .type = "server_error",
                               .code = "shutting_down"});
      return nullptr;
    case Phase::failed: break;
  }
  send_error(res, ApiError{.status = 503, .message = "the model failed to load", .type = "server_error"});
  return nullptr;
}

std::optional<ApiError> check_model(const std::string& model, const ServerState& st) {
  if (model.empty() || model == st.options.served_model_name) return std::nullopt;
  return ApiError{.status = 404,
                  .message = "The model `" + model + "` does not exist; this server serves `" +
                             st.options.served_model_name + "`.",
                  .param = "model",
                  .code = "model_not_found"};
}

std::optional<ApiError> select_model(GenerationRequest& gen, const ServerState& st, const Backend& b) {
  if (gen.model.empty() || gen.model == st.options.served_model_name) return std::nullopt;
  if ((gen.adapter = b.loras->find(gen.model))) return std::nullopt;
  std::string names = "`" + st.options.served_model_name + "`";
  for (const LoraEntry& e : b.loras->list()) names += ", `" + e.name + "`";
  return ApiError{.status = 404,
                  .message = "The model `" + gen.model + "` does not exist; this server serves " + names + ".",
                  .param = "model",
                  .code = "model_not_found"};
}

namespace {

EngineGauges gauges_of(const engine::EngineStats& s, double kv_guard_kld) {
  EngineGauges g{.num_running = s.num_running,
                      .num_waiting = s.num_waiting,
                      .kv_blocks_total = s.kv_blocks_total,
                      .kv_blocks_used = s.kv_blocks_used,
                      .prefix_query_tokens = s.prefix_query_tokens,
                      .prefix_hit_tokens = s.prefix_hit_tokens,
                      .num_preemptions = s.num_preemptions,
                      .num_yields = s.num_yields,
                      .num_prefill_held = s.num_prefill_held,
                      .prompt_tokens_total = s.prompt_tokens_total,
                      .generation_tokens_total = s.generation_tokens_total,
                      .iteration_tokens = s.iteration_tokens,
                      .iteration_token_bounds = {std::begin(engine::kIterationTokenBounds), std::end(engine::kIterationTokenBounds)},
                      .iteration_tokens_sum = s.iteration_tokens_sum,
                      .spec_drafts = s.spec_drafts,
                      .spec_draft_tokens = s.spec_draft_tokens,
                      .spec_accepted_tokens = s.spec_accepted_tokens,
                      .spec_draft_tokens_at = s.spec_draft_tokens_at,
                      .spec_accepted_tokens_at = s.spec_accepted_tokens_at,
                      .kv_layers = s.kv_layers,
                      .kv_quantized_layers = s.kv_quantized_layers,
                      .kv_guard_kld = kv_guard_kld};
  for (const auto& t : s.kv_tiers)
    g.kv_tiers.push_back({.tier = t.tier, .loaded_blocks = t.loaded_blocks, .misses = t.store.misses,
                          .corrupt = t.store.corrupt, .writes = t.store.writes, .write_errors = t.store.write_errors,
                          .dropped = t.store.dropped, .evictions = t.store.evictions, .bytes_read = t.store.bytes_read,
                          .bytes_written = t.store.bytes_written, .bytes_stored = t.store.bytes_stored});
  g.kv_tier_loads = s.kv_tier_loads, g.kv_tier_saved_blocks = s.kv_tier_saved_blocks;
  g.kv_tier_load_seconds = double(s.kv_tier_load_ns) / 1e9;
  return g;
}

void handle_health(ServerState& st, http::Response& res) {
  if (st.phase() == Phase::ready) {
    ordered_json body{{"status", "ok"}};
    // A shared KV pool's identity: a router lets instances that share one trade requests freely.
    if (Backend* b = st.backend(); b && b->engine)
      for (const auto& t : b->engine->stats().kv_tiers)
        if (!t.pool_id.empty()) body["kv_pool"] = t.pool_id;
    return send_json(res, 200, body);
  }
  serving_backend(st, res);  // the 503 that says why
}

void handle_metrics(ServerState& st, http::Response& res) {
  Backend* b = st.backend();
  const HttpGauges http = st.http_gauges ? st.http_gauges() : HttpGauges{};
  std::string text;
  if (b && b->engine) {
    EngineGauges g = gauges_of(b->engine->stats(), b->kv_guard_kld);
    if (b->pusher) g.push = b->pusher->counters();
    if (b->puller) g.pull = b->puller->counters();
    text = st.metrics.render(&g, &http);
  } else {
    text = st.metrics.render(nullptr, &http);
  }
  res.status = 200;
  res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
}

ordered_json model_json(const ServerState& st, const Backend& b) {
  return ordered_json{{"id", st.options.served_model_name},
                      {"object", "model"},
                      {"created", int64_t(std::time(nullptr))},
                      {"owned_by", "kvasir"},
                      {"root", st.options.served_model_name},
                      {"parent", nullptr},
                      {"max_model_len", b.max_model_len}};
}

// The base model, then its LoRA adapters (vLLM's shape: root the adapter's file, parent the base).
void handle_models(ServerState& st, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  ordered_json data = ordered_json::array({model_json(st, *b)});
  for (const LoraEntry& e : b->loras->list()) {
    ordered_json m = model_json(st, *b);
    m["id"] = e.name;
    m["root"] = e.path;
    m["parent"] = st.options.served_model_name;
    data.push_back(std::move(m));
  }
  send_json(res, 200, ordered_json{{"object", "list"}, {"data", std::move(data)}});
}

void handle_tokenize(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  auto r = parse_tokenize_request(json_body(req));
  if (!r) return send_error(res, r.error());
  if (auto e = check_model(r->model, st)) return send_error(res, *e);
  const Tokenizer& tok = *b->tokenizer;
  std::vector<int32_t> ids;
  if (r->is_chat) {
    auto text = b->chat.render(r->messages, chat::ChatRenderOptions{.add_generation_prompt = r->add_generation_prompt});
    if (!text) return send_error(res, bad_request("chat template: " + text.error(), "messages"));
    ids = r->add_special_tokens ? b->chat.tokenize(tok, *text)
                                : tok.encode(*text, EncodeOptions{.add_special = false, .parse_special = true});
  } else {
    ids = tok.encode(r->prompt, EncodeOptions{.add_special = r->add_special_tokens});
  }
  ordered_json out{{"count", ids.size()}, {"max_model_len", b->max_model_len}, {"tokens", ids}};
  if (r->return_token_strs) {
    ordered_json strs = ordered_json::array();
    for (int32_t id : ids) strs.push_back(tok.piece(id));
    out["token_strs"] = std::move(strs);
  }
  send_json(res, 200, out);
}

void handle_detokenize(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  auto r = parse_detokenize_request(json_body(req));
  if (!r) return send_error(res, r.error());
  if (auto e = check_model(r->model, st)) return send_error(res, *e);
  for (int32_t id : r->tokens) {
    if (!b->tokenizer->valid_id(id))
      return send_error(res,
                        bad_request("token id " + std::to_string(id) + " is outside the vocabulary of " +
                                        std::to_string(b->tokenizer->n_vocab()) + " tokens",
                                    "tokens"));
  }
  send_json(res, 200, ordered_json{{"prompt", b->tokenizer->decode(r->tokens)}});
}

}  // namespace

void register_info_routes(http::Router& router, ServerState& st) {
  using Req = http::Request;
  using Res = http::Response;
  // Quick answers run on the I/O thread, so they never wait behind busy workers.
  const http::RouteOptions quick{.run = http::Run::io_thread};
  const http::RouteOptions json_post{.run = http::Run::worker, .json_body = true};
  // Without a key: health (for load balancers), the page (it only asks for the key and holds no
  // data) and, when the server was told so, /metrics. Everything else needs the key (docs/API.md).
  const http::RouteOptions open{.run = http::Run::io_thread, .auth = http::Auth::open};
  router.add("GET", "/", [](const Req&, Res& res) { res.set_content(std::string(web_ui_html()), "text/html; charset=utf-8"); }, open);
  router.add("GET", "/health", [&st](const Req&, Res& res) { handle_health(st, res); }, open);
  router.add("GET", "/metrics", [&st](const Req&, Res& res) { handle_metrics(st, res); },
             st.options.access.metrics_public ? open : quick);
  router.add("GET", "/v1/models", [&st](const Req&, Res& res) { handle_models(st, res); }, quick);
  // One model per server: its own path (any other id is the router's 404).
  router.add("GET", "/v1/models/" + st.options.served_model_name, [&st](const Req&, Res& res) {
    if (Backend* b = serving_backend(st, res)) send_json(res, 200, model_json(st, *b));
  }, quick);
  router.add("POST", "/tokenize", [&st](const Req& req, Res& res) { handle_tokenize(st, req, res); }, json_post);
  router.add("POST", "/detokenize", [&st](const Req& req, Res& res) { handle_detokenize(st, req, res); }, json_post);
}

}  // namespace kvasir::server
