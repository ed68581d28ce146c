#include "server/generation.h"

#include <algorithm>
#include <random>

#include "server/http_util.h"

namespace kvasir::server {

namespace {

using SteadyClock = std::chrono::steady_clock;

double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

ApiError context_error(std::string message) {
  return bad_request(std::move(message), "messages", "context_length_exceeded");
}

}  // namespace

Parsed<int32_t> check_prompt(const std::vector<int32_t>& prompt, const GenerationRequest& request, Endpoint endpoint,
                             const Tokenizer& tokenizer, int32_t max_model_len, int32_t default_max_tokens) {
  const char* param = endpoint == Endpoint::chat ? "messages" : "prompt";
  if (prompt.empty()) return bad_request("the prompt is empty (it tokenizes to no tokens)", param);
  for (int32_t id : prompt) {
    if (!tokenizer.valid_id(id))
      return bad_request("token id " + std::to_string(id) + " is outside the vocabulary of " +
                             std::to_string(tokenizer.n_vocab()) + " tokens",
                         param);
  }
  const int64_t n = int64_t(prompt.size());
  if (n >= max_model_len) {
    ApiError e = context_error("This model's maximum context length is " + std::to_string(max_model_len) +
                               " tokens. However, your prompt has " + std::to_string(n) +
                               " tokens, which leaves no room for an answer. Please shorten the prompt.");
    e.param = param;
    return e;
  }
  const int32_t room = int32_t(max_model_len - n);
  if (!request.max_tokens) {
    if (default_max_tokens > 0) return std::min(default_max_tokens, room);
    return endpoint == Endpoint::chat ? room : std::min<int32_t>(16, room);
  }
  if (int64_t(*request.max_tokens) > room) {
    ApiError e = context_error("This model's maximum context length is " + std::to_string(max_model_len) +
                               " tokens. However, you requested " + std::to_string(n + *request.max_tokens) +
                               " tokens (" + std::to_string(n) + " in the prompt, " +
                               std::to_string(*request.max_tokens) +
                               " for the completion). Please reduce the prompt or max_tokens.");
    e.param = "max_tokens";
    return e;
  }
  return *request.max_tokens;
}

std::optional<ApiError> check_text_length(size_t text_bytes, const Tokenizer& tokenizer, int32_t max_model_len,
                                          Endpoint endpoint) {
  const size_t per_token = size_t(std::max(tokenizer.max_piece_bytes(), 1));
  const size_t least = text_bytes / per_token + (text_bytes % per_token != 0);
  if (max_model_len > 0 && least < size_t(max_model_len)) return std::nullopt;
  ApiError e = context_error("This model's maximum context length is " + std::to_string(max_model_len) +
                             " tokens. However, your prompt of " + std::to_string(text_bytes) +
                             " bytes has at least " + std::to_string(least) +
                             " tokens, which leaves no room for an answer. Please shorten the prompt.");
  e.param = endpoint == Endpoint::chat ? "messages" : "prompt";
  return e;
}

std::optional<ApiError> check_request_ids(const GenerationRequest& request, const Tokenizer& tokenizer) {
  for (const auto& [id, bias] : request.logit_bias) {
    if (!tokenizer.valid_id(id))
      return bad_request("logit_bias names token id " + std::to_string(id) + ", outside the vocabulary of " +
                             std::to_string(tokenizer.n_vocab()) + " tokens",
                         "logit_bias");
  }
  for (int32_t id : request.stop_token_ids) {
    if (!tokenizer.valid_id(id))
      return bad_request("stop_token_ids names token id " + std::to_string(id) + ", outside the vocabulary",
                         "stop_token_ids");
  }
  return std::nullopt;
}

uint64_t random_seed() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

void stream_body(http::Response& res, std::string content_type, std::function<bool(http::StreamSink&)> pump,
                 std::function<void()> on_broken) {
  res.status = 200;
  res.headers.set("Cache-Control", "no-cache");
  res.headers.set("X-Accel-Buffering", "no");  // proxies must not hold the pieces back
  res.content_type = std::move(content_type);
  res.stream = std::move(pump);
  res.on_close = [on_broken = std::move(on_broken)](bool completed) {
    if (!completed) on_broken();
  };
}

std::string tenant_salt(const http::Request& req, const std::string& client_salt) {
  if (req.principal.empty()) return client_salt;
  return req.principal + '\x1f' + client_salt;
}

Parsed<std::shared_ptr<const grammar::CompiledGrammar>> request_grammar(const GenerationRequest& request,
                                                                        engine::GrammarCache& grammars) {
  if (!request.format) return std::shared_ptr<const grammar::CompiledGrammar>();
  const OutputFormat& f = *request.format;
  using Kind = engine::GrammarSpec::Kind;
  const Kind kind = f.kind == OutputFormat::Kind::gbnf          ? Kind::gbnf
                    : f.kind == OutputFormat::Kind::json_schema ? Kind::json_schema
                                                                : Kind::json_object;
  auto g = grammars.get({kind, f.text});
  if (!g) return bad_request(g.error(), f.param, "invalid_grammar");
  return *g;
}

void set_slo(engine::GenerationParams& p, const RequestSlo& slo) {
  p.service_class = slo.batch ? sched::ServiceClass::batch : sched::ServiceClass::interactive;
  p.tenant = slo.tenant;
  p.tenant_weight = slo.weight;
  p.ttft_deadline_ms = slo.ttft_deadline_ms;
}

engine::GenerationParams engine_params(const GenerationRequest& r, std::vector<int32_t> prompt, int32_t max_tokens,
                                       uint64_t base_seed, int32_t choice_seq,
                                       std::shared_ptr<const grammar::CompiledGrammar> grammar) {
  engine::GenerationParams p;
  p.prompt = std::move(prompt);
  const SamplingRequest& s = r.sampling;
  p.sampling.temperature = s.temperature;
  p.sampling.top_k = s.top_k;
  p.sampling.top_p = s.top_p;
  p.sampling.min_p = s.min_p;
  p.sampling.repetition_penalty = s.repetition_penalty;
  p.sampling.presence_penalty = s.presence_penalty;
  p.sampling.frequency_penalty = s.frequency_penalty;
  p.sampling.seed = base_seed + uint64_t(choice_seq);
  p.stop.max_tokens = max_tokens;
  p.stop.min_tokens = std::min(r.min_tokens, max_tokens);
  p.stop.stop_strings = r.stop;
  p.stop.stop_token_ids = r.stop_token_ids;
  p.stop.ignore_eos = r.ignore_eos;
  p.priority = r.priority;
  set_slo(p, r.slo);
  p.cache_salt = r.cache_salt;
  p.adapter = r.adapter;
  p.top_logprobs = r.top_logprobs;
  p.prompt_logprobs = r.prompt_logprobs;
  p.logit_bias = r.logit_bias;
  p.speculative = r.speculative;
  p.grammar = std::move(grammar);
  return p;
}

Parsed<std::unique_ptr<GenerationJob>> GenerationJob::submit(engine::Engine& engine, Metrics& metrics,
                                                             std::vector<engine::GenerationParams> params,
                                                             std::vector<int32_t> prompt_of, const KvFetch& fetch_kv) {
  std::unique_ptr<GenerationJob> job(new GenerationJob(engine, metrics));
  job->choices_.reserve(params.size());
  for (size_t i = 0; i < params.size() && fetch_kv; ++i)
    if (i == 0 || prompt_of[i] != prompt_of[i - 1]) fetch_kv(params[i].prompt, params[i].cache_salt);
  for (size_t i = 0; i < params.size(); ++i) {
    const int32_t prompt_tokens = int32_t(params[i].prompt.size());
    std::string service_class(sched::to_string(params[i].service_class)), tenant = params[i].tenant;
    const double ttft_deadline_ms = params[i].ttft_deadline_ms;
    auto stream = engine.submit(std::move(params[i]));
    if (!stream) {  // ~GenerationJob aborts the queued ones
      if (stream.error_code() == ErrorCode::exhausted) metrics.record_refused(service_class, tenant);
      return api_error(stream.error_info());
    }
    Choice c;
    c.index = int32_t(i);
    c.prompt_index = prompt_of[i];
    c.prompt_tokens = prompt_tokens;
    c.service_class = std::move(service_class);
    c.tenant = std::move(tenant);
    c.ttft_deadline_ms = ttft_deadline_ms;
    c.stream = std::move(*stream);
    c.submitted = SteadyClock::now();
    job->choices_.push_back(std::move(c));
  }
  return job;
}

GenerationJob::~GenerationJob() { abort_all(); }

void GenerationJob::end_now(Choice& c, engine::FinishReason reason) {
  if (c.finished) return;
  engine_.abort(c.stream->id());
  c.finished = true;
  engine::Delta last;
  last.finish = reason;
  last.usage.prompt_tokens = c.prompt_tokens;
  last.usage.completion_tokens = int32_t(c.tokens_seen);
  c.usage = last.usage;
  record(c, last);
}

void GenerationJob::stop(int32_t choice) { end_now(choices_.at(size_t(choice)), engine::FinishReason::Stop); }

void GenerationJob::abort_all() {
  for (Choice& c : choices_) end_now(c, engine::FinishReason::Abort);
}

bool GenerationJob::all_finished() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.finished; });
}

bool GenerationJob::wait_ready(std::chrono::milliseconds timeout) {
  for (size_t tried = 0; tried < choices_.size(); ++tried) {
    const Choice& c = choices_[(cursor_ + tried) % choices_.size()];
    if (!c.finished) return c.stream->wait_ready(timeout);  // the one next() reads first
  }
  return true;
}

bool GenerationJob::next(int32_t& choice, engine::Delta& delta) {
  for (size_t tried = 0; tried < choices_.size(); ++tried) {
    Choice& c = choices_[cursor_];
    const size_t at = cursor_;
    cursor_ = (cursor_ + 1) % choices_.size();
    if (c.finished) continue;
    if (!c.stream->next(delta)) {  // ended without a final delta: treat as aborted
      delta = engine::Delta{};
      delta.finish = engine::FinishReason::Abort;
    }
    const auto now = SteadyClock::now();
    if (!delta.tokens.empty()) {
      if (c.tokens_seen == 0) {
        c.first_token = now;
      } else {
        // Tokens that arrive together share the gap since the previous delta.
        const double gap = seconds(now - c.last_token) / double(delta.tokens.size());
        for (size_t k = 0; k < delta.tokens.size(); ++k) c.itl_s.push_back(gap);
      }
      c.last_token = now;
      c.tokens_seen += int64_t(delta.tokens.size());
    }
    if (delta.finish != engine::FinishReason::None) {
      c.finished = true;
      c.usage = delta.usage;
      record(c, delta);
    }
    choice = int32_t(at);
    return true;
  }
  return false;
}

void GenerationJob::record(Choice& c, const engine::Delta& d) {
  RequestRecord r;
  const auto now = SteadyClock::now();
  // Engine timings when it has them (they start at arrival in the engine), else what we saw.
  r.queue_s = d.timings.queue_ms >= 0 ? d.timings.queue_ms / 1e3 : -1;
  r.ttft_s = d.timings.ttft_ms >= 0 ? d.timings.ttft_ms / 1e3
                                    : (c.tokens_seen ? seconds(c.first_token - c.submitted) : -1);
  r.e2e_s = d.timings.e2e_ms >= 0 ? d.timings.e2e_ms / 1e3 : seconds(now - c.submitted);
  r.tpot_s = d.timings.tpot_ms >= 0 ? d.timings.tpot_ms / 1e3
                                    : (c.tokens_seen > 1 ? seconds(c.last_token - c.first_token) / double(c.tokens_seen - 1) : -1);
  r.itl_s = std::move(c.itl_s);
  r.prompt_tokens = d.usage.prompt_tokens ? d.usage.prompt_tokens : c.prompt_tokens;
  r.completion_tokens = d.usage.completion_tokens ? d.usage.completion_tokens : c.tokens_seen;
  r.cached_tokens = d.usage.cached_tokens;
  const ordered_json reason = finish_reason_json(d.finish);
  r.finish_reason = reason.is_string() ? reason.get<std::string>() : "unknown";
  r.service_class = c.service_class;
  r.tenant = c.tenant;
  r.ttft_deadline_s = c.ttft_deadline_ms / 1e3;
  metrics_.observe(r);
}

UsageTotals GenerationJob::usage() const {
  UsageTotals u;
  std::vector<bool> seen_prompt;
  for (const Choice& c : choices_) {
    u.completion_tokens += c.usage.completion_tokens;
    if (size_t(c.prompt_index) >= seen_prompt.size()) seen_prompt.resize(size_t(c.prompt_index) + 1, false);
    if (seen_prompt[size_t(c.prompt_index)]) continue;
    seen_prompt[size_t(c.prompt_index)] = true;
    u.prompt_tokens += c.usage.prompt_tokens ? c.usage.prompt_tokens : c.prompt_tokens;
    u.cached_tokens += c.usage.cached_tokens;
  }
  return u;
}

}  // namespace kvasir::server
