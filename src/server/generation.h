// From a validated OpenAI request to engine requests and back: prompt checks against the model
// (vocabulary, context length), GenerationParams per choice, and a GenerationJob that owns the
// engine requests of one HTTP request, reads their deltas and records their metrics.
#pragma once
#include <chrono>
#include <functional>
#include <span>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/structured.h"
#include "http/message.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "server/responses.h"

namespace kvasir::server {

// Checks a tokenized prompt against the model and resolves max_tokens: the request's value, or
// the server's default (serve --default-max-tokens, within the context left), or without one the
// endpoint's (16 for completions as in OpenAI; the rest of the context for chat).
// A prompt that leaves no room, or prompt + max_tokens beyond the context, is a 400 with code
// context_length_exceeded.
Parsed<int32_t> check_prompt(const std::vector<int32_t>& prompt, const GenerationRequest& request, Endpoint endpoint,
                             const Tokenizer& tokenizer, int32_t max_model_len, int32_t default_max_tokens = 0);
// Before tokenizing: a text of `text_bytes` bytes encodes to at least
// ceil(text_bytes / tokenizer.max_piece_bytes()) tokens, so when that many already fill the
// context the prompt is rejected as check_prompt would (400 context_length_exceeded) without
// spending the tokenizer's time and memory on it. nullopt: it may fit; check_prompt decides.
std::optional<ApiError> check_text_length(size_t text_bytes, const Tokenizer& tokenizer, int32_t max_model_len,
                                          Endpoint endpoint);
// Checks the token ids a request names outside its prompt (logit_bias, stop_token_ids).
std::optional<ApiError> check_request_ids(const GenerationRequest& request, const Tokenizer& tokenizer);

// The prefix cache is partitioned per API key, so that cached_tokens cannot tell one tenant what
// another sent; a client's own cache_salt partitions further within its key.
std::string tenant_salt(const http::Request& req, const std::string& client_salt);

// The compiled grammar of the request's output format (null: free text), or a 400 naming the
// field and what in it is unsupported.
Parsed<std::shared_ptr<const grammar::CompiledGrammar>> request_grammar(const GenerationRequest& request,
                                                                        engine::GrammarCache& grammars);

// The engine request for choice `choice_seq` (0, 1, ...) of a prompt: seeds seed, seed+1, ...
engine::GenerationParams engine_params(const GenerationRequest& request, std::vector<int32_t> prompt,
                                       int32_t max_tokens, uint64_t base_seed, int32_t choice_seq,
                                       std::shared_ptr<const grammar::CompiledGrammar> grammar = nullptr);

// The engine's fields for a resolved SLO (server/slo.h): class, tenant, weight, TTFT deadline.
void set_slo(engine::GenerationParams& p, const RequestSlo& slo);

// A fresh random seed for a request that names none.
uint64_t random_seed();

// Makes `res` a streamed body of `content_type`: the transport calls `pump` until it returns
// false; `on_broken` runs when the stream ended before every piece reached the client.
void stream_body(http::Response& res, std::string content_type, std::function<bool(http::StreamSink&)> pump,
                 std::function<void()> on_broken);

class GenerationJob {
 public:
  struct Choice {
    int32_t index = 0;         // OpenAI choice index
    int32_t prompt_index = 0;  // which prompt of the request
    int32_t prompt_tokens = 0;
    std::string service_class, tenant;  // for the goodput counters
    double ttft_deadline_ms = 0;
    std::shared_ptr<engine::RequestStream> stream;
    bool finished = false;
    engine::Usage usage;
    // Server-side clock, for inter-token latencies and as a fallback for engine timings.
    std::chrono::steady_clock::time_point submitted, first_token, last_token;
    int64_t tokens_seen = 0;
    std::vector<double> itl_s;
  };

  // Submits every choice (params[i] is choice i, of prompt prompt_of[i]). If one is refused, the
  // ones already queued are aborted and the engine's message comes back as the error (503 while
  // the engine drains, else 400).
  // `fetch_kv` (disaggregation: kv_fetch_for) runs once per distinct prompt before it is queued.
  using KvFetch = std::function<void(std::span<const int32_t> prompt, const std::string& salt)>;
  static Parsed<std::unique_ptr<GenerationJob>> submit(engine::Engine& engine, Metrics& metrics,
                                                       std::vector<engine::GenerationParams> params,
                                                       std::vector<int32_t> prompt_of, const KvFetch& fetch_kv = {});
  ~GenerationJob();  // aborts what has not finished: a dropped job frees its KV blocks
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  // The next delta of an unfinished choice, round robin; false once every choice has finished.
  bool next(int32_t& choice, engine::Delta& delta);
  // Waits up to `timeout` for next() to return without blocking (true), e.g. so that a stream
  // still queued can probe its connection meanwhile.
  bool wait_ready(std::chrono::milliseconds timeout);
  void abort_all();
  // Ends one choice now as if it had stopped (its engine request aborted, its KV freed): the
  // answer is complete, e.g. a tool call repeated.
  void stop(int32_t choice);
  bool all_finished() const;
  const std::vector<Choice>& choices() const { return choices_; }
  // Prompt tokens count once per prompt, completion tokens once per choice.
  UsageTotals usage() const;

 private:
  GenerationJob(engine::Engine& engine, Metrics& metrics) : engine_(engine), metrics_(metrics) {}
  void record(Choice& c, const engine::Delta& final_delta);
  void end_now(Choice& c, engine::FinishReason reason);  // the engine request aborted, recorded as `reason`

  engine::Engine& engine_;
  Metrics& metrics_;
  std::vector<Choice> choices_;
  size_t cursor_ = 0;
};

}  // namespace kvasir::server
