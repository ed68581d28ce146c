// POST /v1/responses: OpenAI's Responses API on the chat machinery (openai_responses.h). Finished
// responses are kept in memory, per API key and bounded (entries and bytes, least recently used
// out first), so that previous_response_id continues a conversation; streams send the typed
// events (response.created ... response.output_text.delta ... response.completed).
#include <list>
#include <mutex>
#include <unordered_map>

#include "server/admission.h"
#include "server/generation.h"
#include "server/http_util.h"
#include "server/openai_responses.h"
#include "server/routes.h"
#include "server/tool_setup.h"

namespace kvasir::server {
namespace {

namespace ra = responses_api;

class ResponseStore {
 public:
  static constexpr size_t kMaxEntries = 1024;
  static constexpr size_t kMaxBytes = size_t(64) << 20;

  void put(const std::string& key, ordered_json messages) {
    const size_t bytes = messages.dump().size() + key.size();
    std::lock_guard lock(mu_);
    erase_locked(key);
    lru_.push_front(key);
    map_[key] = Entry{std::move(messages), bytes, lru_.begin()};
    bytes_ += bytes;
    while (!lru_.empty() && (map_.size() > kMaxEntries || bytes_ > kMaxBytes)) erase_locked(lru_.back());
  }

  std::optional<ordered_json> get(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second.pos);
    return it->second.messages;
  }

 private:
  struct Entry {
    ordered_json messages;
    size_t bytes = 0;
    std::list<std::string>::iterator pos;
  };
  void erase_locked(const std::string& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return;
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.pos);
    map_.erase(it);
  }
  std::mutex mu_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, Entry> map_;
  size_t bytes_ = 0;
};

// A response id is only visible to the API key that made it.
std::string store_key(const http::Request& req, const std::string& id) { return req.principal + '\x1f' + id; }

std::string event(const ordered_json& data) {
  return "event: " + data["type"].get<std::string>() + "\ndata: " + dump_json(data) + "\n\n";
}

struct ResponseStream {
  std::shared_ptr<ActiveGuard> guard;
  std::unique_ptr<GenerationJob> job;
  std::shared_ptr<ResponseStore> store;
  std::string key;
  ordered_json conversation;  // without instructions; the answer is appended when done
  bool store_it = true;
  ra::Result result;
  int64_t seq = 0;
  bool started = false;
  std::optional<ToolCallParser> tools;  // function tools: calls come out of the text

  ordered_json ev(const char* type) { return ordered_json{{"type", type}, {"sequence_number", seq++}}; }
  ordered_json part_ev(const char* type) {
    ordered_json e = ev(type);
    e["item_id"] = result.item_id;
    e["output_index"] = 0;
    e["content_index"] = 0;
    return e;
  }
};

void finish(ResponseStream& s, engine::FinishReason reason) {
  const UsageTotals u = s.job->usage();
  s.result.status = reason == engine::FinishReason::Length ? "incomplete" : "completed";
  s.result.input_tokens = u.prompt_tokens;
  s.result.output_tokens = u.completion_tokens;
  s.result.cached_tokens = u.cached_tokens;
  if (s.store_it && reason != engine::FinishReason::Abort) {
    s.conversation.push_back(ra::assistant_turn(s.result));
    s.store->put(s.key, std::move(s.conversation));
  }
}

// New answer text through the tool-call parser: the content, and the calls completed since the
// last call (each becomes a function_call output item). A repeated call ends the answer.
std::string take_text(ResponseStream& s, engine::Delta& d, std::vector<ToolCall>& completed) {
  if (!s.tools) return std::move(d.text);
  const std::string content = content_of(parse_delta(*s.tools, *s.job, 0, d));
  const auto& calls = s.tools->calls();
  for (size_t i = s.result.calls.size(); i < calls.size() && calls[i].complete; ++i) {
    s.result.calls.push_back(calls[i]);
    s.result.call_item_ids.push_back(ra::new_id("fc_"));
    completed.push_back(calls[i]);
  }
  return content;
}

constexpr std::chrono::milliseconds kWaitSlice{100};

bool pump(ResponseStream& s, http::StreamSink& sink) {
  std::string out;
  if (!s.started) {
    s.started = true;
    s.result.message_opened = true;
    for (const char* type : {"response.created", "response.in_progress"}) {
      ordered_json e = s.ev(type);
      e["response"] = ra::response_json(s.result);
      out += event(e);
    }
    ordered_json item = s.ev("response.output_item.added");
    item["output_index"] = 0;
    item["item"] = ra::message_item(s.result, false);
    out += event(item);
    ordered_json part = s.part_ev("response.content_part.added");
    part["part"] = ra::text_part("");
    out += event(part);
  } else {
    int32_t choice = 0;
    engine::Delta d;
    if (!s.job->wait_ready(kWaitSlice)) return true;
    if (!s.job->next(choice, d)) return false;
    std::vector<ToolCall> calls;
    const std::string text = take_text(s, d, calls);
    if (!text.empty()) {
      s.result.text += text;
      ordered_json e = s.part_ev("response.output_text.delta");
      e["delta"] = text;
      e["logprobs"] = ordered_json::array();
      out += event(e);
    }
    // Each completed call: its own output item, after the message (index 0).
    for (size_t k = s.result.calls.size() - calls.size(); k < s.result.calls.size(); ++k) {
      const ToolCall& c = s.result.calls[k];
      const std::string& item_id = s.result.call_item_ids[k];
      const int64_t index = int64_t(k) + 1;
      ordered_json added = s.ev("response.output_item.added");
      added["output_index"] = index;
      added["item"] = ra::function_call_item(c, item_id, false);
      out += event(added);
      for (const char* type : {"response.function_call_arguments.delta", "response.function_call_arguments.done"}) {
        ordered_json e = s.ev(type);
        e["item_id"] = item_id;
        e["output_index"] = index;
        e[std::string(type).ends_with("delta") ? "delta" : "arguments"] = c.arguments;
        out += event(e);
      }
      ordered_json item_done = s.ev("response.output_item.done");
      item_done["output_index"] = index;
      item_done["item"] = ra::function_call_item(c, item_id, true);
      out += event(item_done);
    }
    if (d.finish != engine::FinishReason::None) {
      finish(s, d.finish);
      ordered_json text_done = s.part_ev("response.output_text.done");
      text_done["text"] = s.result.text;
      text_done["logprobs"] = ordered_json::array();
      out += event(text_done);
      ordered_json part_done = s.part_ev("response.content_part.done");
      part_done["part"] = ra::text_part(s.result.text);
      out += event(part_done);
      ordered_json item_done = s.ev("response.output_item.done");
      item_done["output_index"] = 0;
      item_done["item"] = ra::message_item(s.result, true);
      out += event(item_done);
      ordered_json last = s.ev(s.result.status == "incomplete" ? "response.incomplete" : "response.completed");
      last["response"] = ra::response_json(s.result);
      out += event(last);
      if (!sink.write(out)) s.job->abort_all();
      return false;
    }
  }
  if (!out.empty() && !sink.write(out)) {
    s.job->abort_all();
    return false;
  }
  return true;
}

void handle_responses(ServerState& st, const std::shared_ptr<ResponseStore>& store, const http::Request& req,
                      http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  auto r = ra::parse(json_body(req));
  if (!r) return send_error(res, r.error());
  if (auto e = select_model(r->gen, st, *b)) return send_error(res, *e);
  apply_tenancy(st.options.slo, req, r->gen);

  ordered_json conversation = ordered_json::array();
  if (!r->previous_response_id.empty()) {
    auto prev = store->get(store_key(req, r->previous_response_id));
    if (!prev)
      return send_error(res, bad_request("previous response '" + r->previous_response_id +
                                             "' not found (responses are kept in memory, per API key, a bounded number)",
                                         "previous_response_id", "previous_response_not_found"));
    conversation = std::move(*prev);
  }
  for (auto& m : r->input) conversation.push_back(std::move(m));
  ordered_json messages = ordered_json::array();
  if (!r->instructions.empty()) messages.push_back({{"role", "system"}, {"content", r->instructions}});
  for (const auto& m : conversation) messages.push_back(m);

  auto grammar = request_grammar(r->gen, *b->grammars);
  if (!grammar) return send_error(res, grammar.error());
  auto setup = prepare_tools(*b, r->tool_list, r->tool_choice, r->parallel_tool_calls, r->gen.format, messages, *grammar);
  if (!setup) return send_error(res, setup.error());
  auto prompt = chat_prompt(*b, messages, chat::ChatRenderOptions{.tools = r->tools}, r->gen, "input");
  if (!prompt) return send_error(res, prompt.error());
  const uint64_t seed = r->gen.sampling.seed ? *r->gen.sampling.seed : random_seed();
  std::vector<engine::GenerationParams> params;
  params.push_back(engine_params(r->gen, std::move(prompt->ids), prompt->max_tokens, seed, 0, *grammar));
  params.back().grammar_trigger = setup->trigger;
  auto guard = std::make_shared<ActiveGuard>(st);
  auto job = GenerationJob::submit(*b->engine, st.metrics, std::move(params), {0}, kv_fetch_for(*b, req));
  if (!job) return send_error(res, job.error());

  auto s = std::make_shared<ResponseStream>();
  s->guard = std::move(guard);
  s->job = std::move(*job);
  s->store = store;
  s->store_it = r->store;
  s->conversation = std::move(conversation);
  if (setup->context) s->tools = setup->context->parser();
  ra::Result& out = s->result;
  out.tools = r->tools_echo;
  out.tool_choice = r->tool_choice_echo;
  out.parallel_tool_calls = r->parallel_tool_calls;
  out.id = ra::new_id("resp_");
  out.item_id = ra::new_id("msg_");
  out.model = st.options.served_model_name;
  out.created_at = int64_t(std::time(nullptr));
  out.instructions = r->instructions;
  out.previous_response_id = r->previous_response_id;
  out.max_output_tokens = r->gen.max_tokens;
  out.temperature = r->gen.sampling.temperature;
  out.top_p = r->gen.sampling.top_p;
  out.status = "in_progress";
  s->key = store_key(req, out.id);

  if (!r->gen.stream) {
    int32_t choice = 0;
    engine::Delta d;
    engine::FinishReason reason = engine::FinishReason::None;
    for (;;) {
      if (req.client_gone()) return s->job->abort_all();
      if (!s->job->wait_ready(kWaitSlice)) continue;
      if (!s->job->next(choice, d)) break;
      std::vector<ToolCall> calls;
      out.text += take_text(*s, d, calls);
      if (d.finish != engine::FinishReason::None) reason = d.finish;
    }
    finish(*s, reason);
    return send_json(res, 200, ra::response_json(out));
  }
  stream_body(res, "text/event-stream", [s](http::StreamSink& sink) { return pump(*s, sink); },
              [s] { s->job->abort_all(); });
}

}  // namespace

void register_responses_routes(http::Router& router, ServerState& st) {
  auto store = std::make_shared<ResponseStore>();
  const http::RouteOptions json_post{.run = http::Run::worker, .json_body = true};
  router.add("POST", "/v1/responses", [&st, store](const http::Request& req, http::Response& res) {
    handle_responses(st, store, req, res);
  }, json_post);
}

}  // namespace kvasir::server
