// POST /v1/completions and /v1/chat/completions: typed request -> prompt tokens -> one engine
// request per choice -> a JSON response, or an SSE stream that aborts its engine requests when the
// client goes away.
#include <deque>
#include <map>

#include "server/admission.h"
#include "server/generation.h"
#include "server/http_util.h"
#include "server/protocol.h"
#include "server/responses.h"
#include "server/routes.h"
#include "server/sse.h"
#include "server/tool_setup.h"

namespace kvasir::server {

namespace {

// Engine requests of one HTTP request, before submission.
struct PreparedChoices {
  std::vector<engine::GenerationParams> params;
  std::vector<int32_t> prompt_of;  // per choice
  std::vector<std::string> echo;   // per choice: text to print before the answer (completions echo)
};

// Tool-parser events -> the chunk's content text and delta.tool_calls entries.
void apply_events(const std::vector<ToolCallParser::Event>& events, const std::vector<ToolCall>& calls,
                  std::string& content, ordered_json& tool_calls) {
  for (const auto& e : events) {
    if (e.kind == ToolCallParser::Event::Kind::content) {
      content += e.text;
      continue;
    }
    if (tool_calls.is_null()) tool_calls = ordered_json::array();
    if (e.kind == ToolCallParser::Event::Kind::call)
      tool_calls.push_back({{"index", e.index}, {"id", calls[size_t(e.index)].id}, {"type", "function"},
                            {"function", {{"name", e.text}, {"arguments", ""}}}});
    else
      tool_calls.push_back({{"index", e.index}, {"function", {{"arguments", e.text}}}});
  }
}

// Everything a stream needs between calls of the content provider.
struct StreamState {
  std::shared_ptr<ActiveGuard> guard;
  std::unique_ptr<GenerationJob> job;
  ResponseMeta meta;
  const Tokenizer* tokenizer = nullptr;
  bool include_usage = false;
  int32_t top_logprobs = -1;
  std::vector<std::string> echo;
  std::vector<int64_t> text_offsets;  // completions logprobs: where the next token starts
  ScoringOptions scoring;
  std::vector<bool> echo_pending;  // echo + logprobs: the echo chunk waits for the prompt's logprobs
  bool started = false;
  // Chat: whether a choice's first chunk (the one carrying the role) went out. It goes with the
  // choice's first token, never before: clients time the first chunk as the first token.
  std::vector<bool> opened;
  std::optional<ToolContext> tools;
  std::vector<ToolCallParser> parsers;  // per choice, with tools
  // Shared prompt scores (share_prompt_scoring): per choice, the choice that scores its prompt;
  // empty when nothing is scored. A choice whose scores have not come yet has its deltas held, so
  // that its stream still starts with them (the echo, or prompt_logprobs), then replayed.
  std::vector<int32_t> scorer;
  std::vector<bool> waiting;
  std::vector<std::deque<engine::Delta>> held;
  std::deque<std::pair<int32_t, engine::Delta>> replay;
};

// Holds `d` when its choice still waits for its prompt's scores (true: nothing to send now); when
// `d` brings a scorer's scores (or its end), its siblings get a copy and their held deltas are
// queued for replay.
bool hold(StreamState& s, int32_t choice, engine::Delta& d) {
  if (s.scorer.empty()) return false;
  const size_t c = size_t(choice);
  if (s.waiting[c]) {
    s.held[c].push_back(std::move(d));
    return true;
  }
  if (s.scorer[c] != choice || (d.prompt_logprobs.empty() && d.finish == engine::FinishReason::None)) return false;
  for (size_t j = 0; j < s.scorer.size(); ++j) {
    if (j == c || s.scorer[j] != choice || !s.waiting[j]) continue;
    s.waiting[j] = false;
    if (!d.prompt_logprobs.empty()) {
      if (s.held[j].empty()) s.held[j].emplace_back();  // a delta that only carries the scores
      s.held[j].front().prompt_logprobs = d.prompt_logprobs;
    }
    for (engine::Delta& h : s.held[j]) s.replay.emplace_back(int32_t(j), std::move(h));
    s.held[j].clear();
  }
  return false;
}

ordered_json delta_logprobs(StreamState& s, int32_t choice, const engine::Delta& d) {
  if (s.top_logprobs < 0 || d.logprobs.empty()) return nullptr;
  if (s.meta.endpoint == Endpoint::chat) return chat_logprobs_json(*s.tokenizer, d.logprobs, s.top_logprobs > 0);
  return completion_logprobs_json(*s.tokenizer, d.logprobs, s.text_offsets[size_t(choice)]);
}

constexpr std::chrono::milliseconds kKeepAliveEvery{1000};

// One call of the stream: the next piece. False: the stream has ended (done, or the client is gone).
bool pump_once(StreamState& s, http::StreamSink& sink) {
  std::string out;
  const bool with_usage = s.include_usage;
  const bool chat = s.meta.endpoint == Endpoint::chat;
  if (!s.started) {
    s.started = true;
    s.opened.assign(s.job->choices().size(), false);
    if (s.tools)
      for (size_t i = 0; i < s.job->choices().size(); ++i) s.parsers.push_back(s.tools->parser());
    s.echo_pending.assign(s.job->choices().size(), false);
    for (const auto& c : s.job->choices()) {
      const std::string& echo = s.echo[size_t(c.index)];
      if (!chat && s.scoring.echo_logprobs) {
        s.echo_pending[size_t(c.index)] = true;
      } else if (!chat && !echo.empty()) {
        out += sse_event(dump_json(stream_chunk(
            s.meta, ChunkContent{.index = c.index, .text = echo, .first = true, .with_usage_field = with_usage})));
      }
    }
  }
  int32_t choice = 0;
  engine::Delta d;
  bool have = false;
  if (!out.empty()) {
    // The opening chunks go out now, before the first token.
  } else if (!s.replay.empty()) {
    choice = s.replay.front().first;
    d = std::move(s.replay.front().second);
    s.replay.pop_front();
    have = true;
  } else if (!s.job->wait_ready(kKeepAliveEvery)) {
    // Nothing yet (queued, or a long prefill): an SSE comment, which clients ignore, finds out
    // whether the client is still there, so a queued request of a vanished client is freed.
    out = ": keep-alive\n\n";
  } else {
    have = s.job->next(choice, d) && !hold(s, choice, d);
  }
  if (have) {
    ordered_json prompt_lps = nullptr;
    if (s.scoring.prompt_logprobs && !d.prompt_logprobs.empty()) prompt_lps = prompt_logprobs_json(*s.tokenizer, d.prompt_logprobs);
    if (s.echo_pending[size_t(choice)] && !d.prompt_logprobs.empty()) {  // the echo, scored
      s.echo_pending[size_t(choice)] = false;
      const std::string& echo = s.echo[size_t(choice)];
      out += sse_event(dump_json(stream_chunk(
          s.meta, ChunkContent{.index = choice,
                               .text = echo,
                               .logprobs = echo_logprobs_json(*s.tokenizer, d.prompt_logprobs, {}, int64_t(echo.size())),
                               .first = true,
                               .with_usage_field = with_usage,
                               .prompt_logprobs = std::move(prompt_lps)})));
      prompt_lps = nullptr;
    }
    const bool first = chat && !s.opened[size_t(choice)];
    std::string text;
    ordered_json tool_calls = nullptr;
    bool called = false;
    if (!s.parsers.empty()) {  // tool calls come out of the text as delta.tool_calls
      ToolCallParser& p = s.parsers[size_t(choice)];
      apply_events(parse_delta(p, *s.job, choice, d), p.calls(), text, tool_calls);
      called = !p.calls().empty();
    } else {
      text = std::move(d.text);
    }
    if (first || !text.empty() || !tool_calls.is_null() || d.finish != engine::FinishReason::None ||
        (!d.logprobs.empty() && s.top_logprobs >= 0) || !prompt_lps.is_null()) {
      if (chat) s.opened[size_t(choice)] = true;
      out += sse_event(dump_json(stream_chunk(s.meta, ChunkContent{.index = choice,
                                                                   .text = std::move(text),
                                                                   .logprobs = delta_logprobs(s, choice, d),
                                                                   .finish = d.finish,
                                                                   .first = first,
                                                                   .with_usage_field = with_usage,
                                                                   .tool_calls = std::move(tool_calls),
                                                                   .called_tools = called,
                                                                   .prompt_logprobs = std::move(prompt_lps)})));
    }
  }
  const bool done = s.job->all_finished() && s.replay.empty() &&
                    std::all_of(s.held.begin(), s.held.end(), [](const auto& h) { return h.empty(); });
  if (done) {
    if (with_usage) out += sse_event(dump_json(usage_chunk(s.meta, s.job->usage())));
    out += kSseDone;
  }
  if (!out.empty() && !sink.write(out)) {
    s.job->abort_all();
    return false;
  }
  return !done;
}

// Nothing here should throw, but if it does the stream ends and the engine requests are freed.
bool pump(StreamState& s, http::StreamSink& sink) {
  try {
    return pump_once(s, sink);
  } catch (...) {
    s.job->abort_all();
    return false;
  }
}

constexpr std::chrono::milliseconds kHangupCheckEvery{100};

void respond_whole(Backend& b, const http::Request& req, http::Response& res, const GenerationRequest& gen,
                   GenerationJob& job, const ResponseMeta& meta, const std::vector<std::string>& echo,
                   const std::optional<ToolContext>& tools, ScoringOptions scoring, const std::vector<int32_t>& scorer) {
  std::vector<ChoiceOutput> outs(job.choices().size());
  for (size_t i = 0; i < outs.size(); ++i) outs[i] = ChoiceOutput{.index = int32_t(i), .text = echo[i], .echo_bytes = int64_t(echo[i].size())};
  // Tool calls are parsed as the text comes, so that a repeated call ends the answer at once.
  std::vector<ToolCallParser> parsers;
  std::vector<std::string> content(outs.size());
  if (tools)
    for (size_t i = 0; i < outs.size(); ++i) parsers.push_back(tools->parser());
  int32_t choice = 0;
  engine::Delta d;
  for (;;) {
    // A client that hung up gets nothing: its engine requests are aborted, their KV freed.
    if (req.client_gone()) return job.abort_all();
    if (!job.wait_ready(kHangupCheckEvery)) continue;
    if (!job.next(choice, d)) break;
    ChoiceOutput& o = outs[size_t(choice)];
    if (tools) {
      ToolCallParser& p = parsers[size_t(choice)];
      ordered_json unused = nullptr;
      apply_events(parse_delta(p, job, choice, d), p.calls(), content[size_t(choice)], unused);
    }
    o.text += d.text;
    for (auto& lp : d.logprobs) o.logprobs.push_back(std::move(lp));
    if (!d.prompt_logprobs.empty()) o.prompt_logprobs = std::move(d.prompt_logprobs);
    if (d.finish != engine::FinishReason::None) o.finish = d.finish;
  }
  for (size_t i = 0; i < scorer.size(); ++i)
    if (scorer[i] != int32_t(i)) outs[i].prompt_logprobs = outs[size_t(scorer[i])].prompt_logprobs;
  if (tools) {
    for (size_t i = 0; i < outs.size(); ++i) {
      for (const ToolCall& c : parsers[i].calls())
        if (c.complete) outs[i].tool_calls.push_back(c);
      outs[i].text = std::move(content[i]);  // a call cut by max_tokens is left out, never shown as text
    }
  }
  send_json(res, 200,
            full_response(meta, *b.tokenizer, outs, job.usage(), gen.top_logprobs >= 0, gen.top_logprobs, scoring));
}

// n choices of one prompt score it once: the first of them asks the engine for the prompt's
// logprobs, the others get a copy (scoring is a full prefill of every row, n times over was
// 13.6 s for n=64). Returns per choice the choice that scores its prompt; empty when none does.
std::vector<int32_t> share_prompt_scoring(PreparedChoices& pc) {
  std::vector<int32_t> scorer(pc.params.size());
  bool any = false;
  std::map<int32_t, int32_t> first_of_prompt;
  for (size_t i = 0; i < pc.params.size(); ++i) {
    scorer[i] = first_of_prompt.try_emplace(pc.prompt_of[i], int32_t(i)).first->second;
    if (pc.params[i].prompt_logprobs < 0) continue;
    any = true;
    if (scorer[i] != int32_t(i)) pc.params[i].prompt_logprobs = -1;
  }
  if (!any) scorer.clear();
  return scorer;
}

void run_generation(ServerState& st, Backend& b, const http::Request& req, http::Response& res, Endpoint endpoint,
                    const GenerationRequest& gen, PreparedChoices pc, std::optional<ToolContext> tools = std::nullopt,
                    bool echo_logprobs = false) {
  const ScoringOptions scoring{.echo_logprobs = echo_logprobs, .prompt_logprobs = gen.prompt_logprobs >= 0};
  const std::vector<int32_t> scorer = share_prompt_scoring(pc);
  auto guard = std::make_shared<ActiveGuard>(st);
  auto job = GenerationJob::submit(*b.engine, st.metrics, std::move(pc.params), std::move(pc.prompt_of),
                                   kv_fetch_for(b, req));
  if (!job) return send_error(res, job.error());
  ResponseMeta meta = make_meta(endpoint, st.options.served_model_name);
  if (!gen.stream) return respond_whole(b, req, res, gen, **job, meta, pc.echo, tools, scoring, scorer);

  auto s = std::make_shared<StreamState>();
  s->guard = std::move(guard);
  s->job = std::move(*job);
  s->meta = std::move(meta);
  s->tokenizer = &*b.tokenizer;
  s->include_usage = gen.include_usage;
  s->tools = std::move(tools);
  s->top_logprobs = gen.top_logprobs;
  s->scoring = scoring;
  for (const std::string& e : pc.echo) s->text_offsets.push_back(int64_t(e.size()));
  s->echo = std::move(pc.echo);
  s->scorer = scorer;
  for (size_t i = 0; i < scorer.size(); ++i) s->waiting.push_back(scorer[i] != int32_t(i));
  s->held.resize(scorer.size());
  // A broken connection frees the engine requests now.
  stream_body(res, "text/event-stream", [s](http::StreamSink& sink) { return pump(*s, sink); },
              [s] { s->job->abort_all(); });
}

void handle_completions(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  auto r = parse_completion_request(json_body(req));
  if (!r) return send_error(res, r.error());
  if (auto e = select_model(r->gen, st, *b)) return send_error(res, *e);
  if (auto e = check_request_ids(r->gen, *b->tokenizer)) return send_error(res, *e);
  auto grammar = request_grammar(r->gen, *b->grammars);
  if (!grammar) return send_error(res, grammar.error());
  apply_tenancy(st.options.slo, req, r->gen);
  const uint64_t seed = r->gen.sampling.seed ? *r->gen.sampling.seed : random_seed();
  PreparedChoices pc;
  for (size_t p = 0; p < r->prompts.size(); ++p) {
    PromptInput& in = r->prompts[p];
    // A text that must exceed the context is refused before it costs a tokenization.
    if (!in.is_ids) {
      if (auto e = check_text_length(in.text.size(), *b->tokenizer, b->max_model_len, Endpoint::completions))
        return send_error(res, *e);
    }
    std::vector<int32_t> ids = in.is_ids ? std::move(in.ids) : b->tokenizer->encode(in.text);
    auto max_tokens = check_prompt(ids, r->gen, Endpoint::completions, *b->tokenizer, b->max_model_len, b->default_max_tokens);
    if (!max_tokens) return send_error(res, max_tokens.error());
    std::string echo;
    if (r->echo) echo = in.is_ids ? b->tokenizer->decode(ids, /*skip_special=*/true) : in.text;
    for (int32_t j = 0; j < r->gen.n; ++j) {
      pc.params.push_back(engine_params(r->gen, ids, *max_tokens, seed, j, *grammar));
      if (r->echo_logprobs) pc.params.back().prompt_logprobs = std::max(r->gen.top_logprobs, r->gen.prompt_logprobs);
      pc.prompt_of.push_back(int32_t(p));
      pc.echo.push_back(echo);
    }
  }
  run_generation(st, *b, req, res, Endpoint::completions, r->gen, std::move(pc), std::nullopt, r->echo_logprobs);
}

void handle_chat(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  auto r = parse_chat_request(json_body(req));
  if (!r) return send_error(res, r.error());
  if (auto e = select_model(r->gen, st, *b)) return send_error(res, *e);
  if (auto e = check_request_ids(r->gen, *b->tokenizer)) return send_error(res, *e);
  auto grammar = request_grammar(r->gen, *b->grammars);
  if (!grammar) return send_error(res, grammar.error());
  // Tools: the family's call syntax, held to each function's schema by a grammar (lazy for "auto").
  auto setup = prepare_tools(*b, r->tool_list, r->tool_choice, r->parallel_tool_calls, r->gen.format, r->messages, *grammar);
  if (!setup) return send_error(res, setup.error());
  std::optional<ToolContext> tools = std::move(setup->context);
  const std::string trigger = std::move(setup->trigger);
  apply_tenancy(st.options.slo, req, r->gen);
  auto prompt = chat_prompt(*b, r->messages,
                            chat::ChatRenderOptions{.add_generation_prompt = r->add_generation_prompt,
                                              .continue_final_message = r->continue_final_message,
                                              .tools = r->tools,
                                              .extra = r->chat_template_kwargs},
                            r->gen, "messages");
  if (!prompt) return send_error(res, prompt.error());
  const uint64_t seed = r->gen.sampling.seed ? *r->gen.sampling.seed : random_seed();
  PreparedChoices pc;
  for (int32_t j = 0; j < r->gen.n; ++j) {
    pc.params.push_back(engine_params(r->gen, prompt->ids, prompt->max_tokens, seed, j, *grammar));
    pc.params.back().grammar_trigger = trigger;
    pc.prompt_of.push_back(0);
    pc.echo.emplace_back();
  }
  run_generation(st, *b, req, res, Endpoint::chat, r->gen, std::move(pc), std::move(tools));
}

}  // namespace

Parsed<ChatPrompt> chat_prompt(const Backend& b, const ordered_json& messages, const chat::ChatRenderOptions& options,
                               const GenerationRequest& gen, const std::string& messages_param,
                               const chat::ChatFormatter* formatter) {
  const chat::ChatFormatter& chat = formatter ? *formatter : b.chat;
  auto text = chat.render(messages, options);
  if (!text) return bad_request("chat template: " + text.error(), messages_param);
  if (auto e = check_text_length(text->size(), *b.tokenizer, b.max_model_len, Endpoint::chat)) return *e;
  ChatPrompt p{.ids = chat.tokenize(*b.tokenizer, *text)};
  auto max_tokens = check_prompt(p.ids, gen, Endpoint::chat, *b.tokenizer, b.max_model_len, b.default_max_tokens);
  if (!max_tokens) return max_tokens.error();
  p.max_tokens = *max_tokens;
  return p;
}

void register_generation_routes(http::Router& router, ServerState& st) {
  const http::RouteOptions json_post{.run = http::Run::worker, .json_body = true};
  router.add("POST", "/v1/completions", [&st](const http::Request& req, http::Response& res) {
    handle_completions(st, req, res);
  }, json_post);
  router.add("POST", "/v1/chat/completions", [&st](const http::Request& req, http::Response& res) {
    handle_chat(st, req, res);
  }, json_post);
}

}  // namespace kvasir::server
