// llama-server's own routes, for tools written against it: POST /completion (its field names,
// its response and SSE stream shapes), GET /props and GET /slots (read-only). /completion is
// translated into a /v1/completions request, so it runs the same checks and engine path; its
// fields that would change the output and that kvasir does not implement (mirostat, typical_p,
// DRY, XTC, dynamic temperature, top_n_sigma) are refused by name unless given at their neutral
// value.
#include "server/admission.h"
#include "server/generation.h"
#include "server/http_util.h"
#include "server/routes.h"

namespace kvasir::server {
namespace {

constexpr std::chrono::milliseconds kWaitSlice{100};

// llama.cpp's name -> kvasir's /v1/completions name, for fields with the same meaning.
constexpr std::pair<std::string_view, std::string_view> kRenamed[] = {
    {"prompt", "prompt"},       {"temperature", "temperature"}, {"top_k", "top_k"},
    {"top_p", "top_p"},         {"min_p", "min_p"},             {"stop", "stop"},
    {"stream", "stream"},       {"ignore_eos", "ignore_eos"},   {"presence_penalty", "presence_penalty"},
    {"grammar", "grammar"},     {"json_schema", "json_schema"}, {"frequency_penalty", "frequency_penalty"},
    {"repeat_penalty", "repetition_penalty"}, {"model", "model"}, {"cache_salt", "cache_salt"}};
// Accepted and without effect on the output (slots, caching and reporting knobs).
constexpr std::string_view kNoEffect[] = {"cache_prompt", "id_slot", "n_keep", "return_tokens", "post_sampling_probs",
                                          "samplers", "t_max_predict_ms", "timings_per_token", "return_progress",
                                          "n_indent", "repeat_last_n", "penalize_nl", "n_cmpl", "lora"};
// Refused unless at the value that turns them off.
constexpr std::pair<std::string_view, double> kNeutral[] = {
    {"mirostat", 0}, {"typical_p", 1}, {"dynatemp_range", 0}, {"xtc_probability", 0}, {"dry_multiplier", 0},
    {"top_n_sigma", -1}, {"n_probs", 0}};

struct LlamaRequest {
  CompletionRequest c;
  bool return_tokens = false;
  int32_t n_probs = 0;
};

Parsed<LlamaRequest> translate(const ordered_json& doc) {
  if (!doc.is_object()) return bad_request("the body must be a JSON object");
  ordered_json out = ordered_json::object();
  LlamaRequest r;
  for (const auto& [k, v] : doc.items()) {
    if (v.is_null()) continue;
    bool done = false;
    for (auto [from, to] : kRenamed)
      if (k == from) out[std::string(to)] = v, done = true;
    for (auto f : kNoEffect) done |= k == f;
    if (k == "n_predict") {
      if (!v.is_number_integer()) return bad_request("'n_predict' must be an integer", "n_predict");
      if (v.get<int64_t>() >= 0) out["max_tokens"] = v;  // -1: to the end of the context
      done = true;
    } else if (k == "seed") {
      if (!v.is_number_integer()) return bad_request("'seed' must be an integer", "seed");
      if (v.get<int64_t>() >= 0) out["seed"] = v;  // -1: a random seed
      done = true;
    } else if (k == "logit_bias") {  // [[id, bias], ...] or {"id": bias}; false as a bias bans the token
      ordered_json bias = ordered_json::object();
      if (v.is_array()) {
        for (const auto& e : v) {
          if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer())
            return bad_request("'logit_bias' entries must be [token id, bias]", "logit_bias");
          bias[std::to_string(e[0].get<int64_t>())] = e[1].is_boolean() ? ordered_json(-100) : e[1];
        }
      } else if (v.is_object()) {
        bias = v;
      } else {
        return bad_request("'logit_bias' must be an array or an object", "logit_bias");
      }
      out["logit_bias"] = bias;
      done = true;
    } else if (k == "return_tokens") {
      r.return_tokens = v.is_boolean() && v.get<bool>();
    } else if (k == "n_probs") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 20)
        return bad_request("'n_probs' must be an integer in [0, 20]", "n_probs");
      r.n_probs = v.get<int32_t>();
      if (r.n_probs > 0) out["logprobs"] = r.n_probs;
      done = true;
    }
    if (!done)
      for (auto [name, neutral] : kNeutral)
        if (k == name) {
          if (!v.is_number() || v.get<double>() != neutral)
            return bad_request("'" + k + "' is not supported (only " + std::to_string(int(neutral)) + ", which turns it off)", k);
          done = true;
        }
    if (!done) return bad_request("unsupported field '" + k + "'", k, "unsupported_field");
  }
  if (!out.contains("prompt")) return bad_request("'prompt' is required", "prompt");
  if (out["prompt"].is_array() && !out["prompt"].empty() && !out["prompt"][0].is_number_integer() &&
      out["prompt"].size() > 1)
    return bad_request("one prompt per request (a string or token ids)", "prompt");
  auto c = parse_completion_request(JsonBody{std::move(out)});
  if (!c) return c.error();
  if (c->prompts.size() != 1) return bad_request("one prompt per request (a string or token ids)", "prompt");
  r.c = std::move(*c);
  return r;
}

const char* stop_type(engine::FinishReason f) {
  switch (f) {
    case engine::FinishReason::Stop: return "eos";
    case engine::FinishReason::Length: return "limit";
    case engine::FinishReason::StopString: return "word";
    default: return "none";
  }
}

ordered_json token_json(const Tokenizer& tok, int32_t id, float logprob) {
  const std::string text = tok.decode(std::span<const int32_t>(&id, 1));
  ordered_json bytes = ordered_json::array();
  for (unsigned char ch : text) bytes.push_back(int(ch));
  return ordered_json{{"id", id}, {"token", text}, {"bytes", std::move(bytes)}, {"logprob", logprob}};
}

ordered_json probabilities(const Tokenizer& tok, const std::vector<engine::TokenLogprob>& lps) {
  ordered_json out = ordered_json::array();
  for (const auto& lp : lps) {
    ordered_json e = token_json(tok, lp.token, lp.logprob);
    ordered_json top = ordered_json::array();
    for (const auto& [id, l] : lp.top) top.push_back(token_json(tok, id, l));
    e["top_logprobs"] = std::move(top);
    out.push_back(std::move(e));
  }
  return out;
}

ordered_json timings_json(const engine::Timings& t, int64_t prompt_n, int64_t predicted_n) {
  const double prompt_ms = t.ttft_ms >= 0 ? std::max(0.0, t.ttft_ms - std::max(0.0, t.queue_ms)) : 0;
  const double predicted_ms = t.e2e_ms >= 0 && t.ttft_ms >= 0 ? std::max(0.0, t.e2e_ms - t.ttft_ms) : 0;
  auto per = [](double ms, int64_t n) { return n > 0 ? ms / double(n) : 0.0; };
  auto rate = [](double ms, int64_t n) { return ms > 0 ? 1e3 * double(n) / ms : 0.0; };
  return ordered_json{{"prompt_n", prompt_n},        {"prompt_ms", prompt_ms},
                      {"prompt_per_token_ms", per(prompt_ms, prompt_n)}, {"prompt_per_second", rate(prompt_ms, prompt_n)},
                      {"predicted_n", predicted_n},  {"predicted_ms", predicted_ms},
                      {"predicted_per_token_ms", per(predicted_ms, predicted_n)},
                      {"predicted_per_second", rate(predicted_ms, predicted_n)}};
}

struct LlamaStream {
  std::shared_ptr<ActiveGuard> guard;
  std::unique_ptr<GenerationJob> job;
  const Tokenizer* tok = nullptr;
  std::string model;
  int32_t prompt_n = 0, predicted_n = 0;
  bool return_tokens = false, probs = false;
};

// The final object (of the stream, or the whole answer): content so far, stop, timings.
ordered_json final_json(const LlamaStream& s, const std::string& content, const std::vector<int32_t>& tokens,
                        const engine::Delta& last, int64_t cached) {
  return ordered_json{{"index", 0},
                      {"content", content},
                      {"tokens", s.return_tokens ? ordered_json(tokens) : ordered_json::array()},
                      {"id_slot", -1},
                      {"stop", true},
                      {"model", s.model},
                      {"tokens_predicted", s.predicted_n},
                      {"tokens_evaluated", s.prompt_n},
                      {"has_new_line", content.find('\n') != std::string::npos},
                      {"truncated", false},
                      {"stop_type", stop_type(last.finish)},
                      {"stopping_word", ""},
                      {"tokens_cached", cached},
                      {"timings", timings_json(last.timings, s.prompt_n, s.predicted_n)}};
}

bool pump(LlamaStream& s, http::StreamSink& sink) {
  int32_t choice = 0;
  engine::Delta d;
  if (!s.job->wait_ready(kWaitSlice)) return true;
  if (!s.job->next(choice, d)) return false;
  s.predicted_n += int32_t(d.tokens.size());
  const bool done = d.finish != engine::FinishReason::None;
  ordered_json j;
  if (done) {
    j = final_json(s, d.text, d.tokens, d, s.job->usage().cached_tokens);
  } else {
    if (d.text.empty() && d.tokens.empty()) return true;
    j = ordered_json{{"index", 0}, {"content", d.text},
                     {"tokens", s.return_tokens ? ordered_json(d.tokens) : ordered_json::array()},
                     {"stop", false}, {"id_slot", -1}, {"tokens_predicted", s.predicted_n}, {"tokens_evaluated", s.prompt_n}};
  }
  if (s.probs && !d.logprobs.empty()) j["completion_probabilities"] = probabilities(*s.tok, d.logprobs);
  if (!sink.write("data: " + j.dump() + "\n\n")) {
    s.job->abort_all();
    return false;
  }
  return !done;
}

void handle_completion(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  auto r = translate(json_body(req).doc);
  if (!r) return send_error(res, r.error());
  GenerationRequest& gen = r->c.gen;
  if (auto e = select_model(gen, st, *b)) return send_error(res, *e);
  if (auto e = check_request_ids(gen, *b->tokenizer)) return send_error(res, *e);
  auto grammar = request_grammar(gen, *b->grammars);
  if (!grammar) return send_error(res, grammar.error());
  apply_tenancy(st.options.slo, req, gen);
  PromptInput& in = r->c.prompts[0];
  if (!in.is_ids)
    if (auto e = check_text_length(in.text.size(), *b->tokenizer, b->max_model_len, Endpoint::chat)) return send_error(res, *e);
  std::vector<int32_t> ids = in.is_ids ? std::move(in.ids) : b->tokenizer->encode(in.text);
  // n_predict absent or -1: to the end of the context, as llama-server.
  auto max_tokens = check_prompt(ids, gen, Endpoint::chat, *b->tokenizer, b->max_model_len, b->default_max_tokens);
  if (!max_tokens) return send_error(res, max_tokens.error());
  const uint64_t seed = gen.sampling.seed ? *gen.sampling.seed : random_seed();
  auto s = std::make_shared<LlamaStream>();
  s->prompt_n = int32_t(ids.size());
  std::vector<engine::GenerationParams> params;
  params.push_back(engine_params(gen, std::move(ids), *max_tokens, seed, 0, *grammar));
  s->guard = std::make_shared<ActiveGuard>(st);
  auto job = GenerationJob::submit(*b->engine, st.metrics, std::move(params), {0}, kv_fetch_for(*b, req));
  if (!job) return send_error(res, job.error());
  s->job = std::move(*job);
  s->tok = &*b->tokenizer;
  s->model = gen.model.empty() ? st.options.served_model_name : gen.model;
  s->return_tokens = r->return_tokens;
  s->probs = r->n_probs > 0;
  if (gen.stream) {
    stream_body(res, "text/event-stream", [s](http::StreamSink& sink) { return pump(*s, sink); },
                [s] { s->job->abort_all(); });
    return;
  }
  std::string content;
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprob> lps;
  engine::Delta d, last;
  int32_t choice = 0;
  for (;;) {
    if (req.client_gone()) return s->job->abort_all();
    if (!s->job->wait_ready(kWaitSlice)) continue;
    if (!s->job->next(choice, d)) break;
    content += d.text;
    tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
    lps.insert(lps.end(), d.logprobs.begin(), d.logprobs.end());
    if (d.finish != engine::FinishReason::None) last = d;
  }
  s->predicted_n = int32_t(tokens.size());
  ordered_json out = final_json(*s, content, tokens, last, s->job->usage().cached_tokens);
  if (s->probs) out["completion_probabilities"] = probabilities(*b->tokenizer, lps);
  send_json(res, 200, out);
}

ordered_json default_params(const Backend& b) {
  return ordered_json{{"n_predict", -1},  {"temperature", 0.8}, {"top_k", 40},           {"top_p", 0.95},
                      {"min_p", 0.05},    {"repeat_penalty", 1.0}, {"presence_penalty", 0.0},
                      {"frequency_penalty", 0.0}, {"seed", -1},  {"n_probs", 0},          {"stream", false},
                      {"n_ctx", b.max_model_len}};
}

}  // namespace

void register_llamacpp_routes(http::Router& router, ServerState& st) {
  using Req = http::Request;
  using Res = http::Response;
  const http::RouteOptions quick{.run = http::Run::io_thread};
  const http::RouteOptions json_post{.run = http::Run::worker, .json_body = true};
  router.add("POST", "/completion", [&st](const Req& req, Res& res) { handle_completion(st, req, res); }, json_post);
  router.add("POST", "/completions", [&st](const Req& req, Res& res) { handle_completion(st, req, res); }, json_post);
  router.add("GET", "/props", [&st](const Req&, Res& res) {
    Backend* b = serving_backend(st, res);
    if (!b) return;
    const engine::EngineStats s = b->engine->stats();
    send_json(res, 200,
              ordered_json{{"default_generation_settings", {{"id", 0}, {"n_ctx", b->max_model_len}, {"params", default_params(*b)}}},
                           {"total_slots", s.max_seqs},
                           {"model_alias", st.options.served_model_name},
                           {"model_path", st.options.served_model_name},  // no path of this machine goes out
                           {"chat_template", b->chat.source()},
                           {"modalities", {{"vision", false}, {"audio", false}}},
                           {"build_info", "kvasir"}});
  }, quick);
  // The engine's seats as llama-server's slots: the first num_running are busy.
  router.add("GET", "/slots", [&st](const Req&, Res& res) {
    Backend* b = serving_backend(st, res);
    if (!b) return;
    const engine::EngineStats s = b->engine->stats();
    ordered_json slots = ordered_json::array();
    for (int32_t i = 0; i < s.max_seqs; ++i)
      slots.push_back(ordered_json{{"id", i}, {"id_task", -1}, {"n_ctx", b->max_model_len}, {"speculative", false},
                                   {"is_processing", i < s.num_running}, {"params", default_params(*b)}});
    send_json(res, 200, slots);
  }, quick);
}

}  // namespace kvasir::server
