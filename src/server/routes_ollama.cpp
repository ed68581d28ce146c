// Ollama's API on the same engine (ollama_protocol.h): /api/generate and /api/chat (NDJSON
// streams, one JSON object per line, the last with "done": true and the timings), /api/tags,
// /api/show, /api/ps, /api/version. Errors are Ollama's shape, {"error": "message"}.
#include <sys/stat.h>


#include "server/admission.h"
#include "server/generation.h"
#include "server/http_util.h"
#include "server/ollama_protocol.h"
#include "server/ollama_routes.h"
#include "server/routes.h"
#include "server/tool_setup.h"

namespace kvasir::server {
namespace {

// The API level of Ollama's that these routes follow (clients gate features on it).
constexpr const char* kOllamaApiVersion = "0.6.0";

std::string ollama_name(const ServerState& st) { return st.options.served_model_name + ":latest"; }

// llama.cpp's general.file_type values, as Ollama shows them.
std::string quantization_level(const gguf::File& g) {
  auto t = g.get_int("general.file_type");
  if (!t) return "unknown";
  switch (*t) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K_S";
    case 12: return "Q3_K_M";
    case 13: return "Q3_K_L";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return "unknown";
  }
}

int64_t parameter_count(const gguf::File& g) {
  int64_t n = 0;
  for (const auto& t : g.tensors) n += t.num_elements();
  return n;
}

std::string parameter_size(int64_t n) {
  char buf[32];
  if (n >= 1000000000) std::snprintf(buf, sizeof buf, "%.1fB", double(n) / 1e9);
  else std::snprintf(buf, sizeof buf, "%.1fM", double(n) / 1e6);
  return buf;
}

ordered_json details(const Backend& b) {
  const std::string& arch = b.model->config().arch_name;
  return ordered_json{{"parent_model", ""},     {"format", "gguf"},
                      {"family", arch},         {"families", ordered_json::array({arch})},
                      {"parameter_size", parameter_size(parameter_count(b.model->gguf()))},
                      {"quantization_level", quantization_level(b.model->gguf())}};
}

struct FileInfo {
  int64_t size = 0;
  std::string modified_at;
};

FileInfo file_info(const Backend& b) {
  FileInfo f;
  struct stat st {};
  if (::stat(b.model->path().c_str(), &st) != 0) return f;
  f.size = int64_t(st.st_size);
  std::tm tm{};
  gmtime_r(&st.st_mtime, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  f.modified_at = buf;
  return f;
}

ordered_json model_entry(const ServerState& st, const Backend& b) { return ollama_model_entry(b, ollama_name(st)); }

void handle_show(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  const ordered_json doc = json_body(req).doc;
  std::string name;
  if (doc.is_object()) {
    for (const char* key : {"model", "name"})
      if (doc.contains(key) && doc[key].is_string()) name = doc[key].get<std::string>();
  }
  // A catalog entry or an adapter over the served weights shows them, with its own defaults.
  ordered_json probe{{"model", name}, {"messages", ordered_json::array()}};
  std::string entry_template;
  if (auto e = apply_catalog(st, *b, probe, true, &entry_template)) return send_ollama_error(res, *e);
  const std::string base = normalize_model_name(probe["model"].get<std::string>());
  if (!ollama::same_model(base, st.options.served_model_name) && !b->loras->find(base))
    return send_ollama_error(res, ApiError{.status = 404, .message = "model '" + name + "' not found"});
  std::string parameters;
  if (probe.contains("options"))
    for (const auto& [k, v] : probe["options"].items()) parameters += k + " " + (v.is_string() ? v.get<std::string>() : v.dump()) + "\n";
  std::string system;
  if (!probe["messages"].empty()) system = probe["messages"][0]["content"].get<std::string>();
  const ModelConfig& c = b->model->config();
  const std::string& a = c.arch_name;
  ordered_json info{{"general.architecture", a},
                    {"general.parameter_count", parameter_count(b->model->gguf())},
                    {a + ".context_length", c.n_ctx_train},
                    {a + ".embedding_length", c.n_embd},
                    {a + ".block_count", c.n_layers},
                    {a + ".attention.head_count", c.n_heads},
                    {a + ".attention.head_count_kv", c.n_kv_heads},
                    {"tokenizer.ggml.vocab_size", c.n_vocab}};
  if (c.moe()) {
    info[a + ".expert_count"] = c.n_experts;
    info[a + ".expert_used_count"] = c.n_experts_used;
  }
  send_json(res, 200,
            ordered_json{{"modelfile", ""},
                         {"parameters", parameters},
                         {"system", system},
                         {"template", entry_template.empty() ? b->chat.source() : entry_template},
                         {"details", details(*b)},
                         {"model_info", std::move(info)},
                         // Tools work with every template (a generic call format where it has none).
                         {"capabilities", ordered_json::array({"completion", "tools"})},
                         {"modified_at", file_info(*b).modified_at}});
}

// Between calls of a streamed response's provider.
struct NdjsonStream {
  std::shared_ptr<ActiveGuard> guard;
  std::unique_ptr<GenerationJob> job;
  std::string model;
  bool is_chat = false;
  std::optional<ToolCallParser> tools;  // a chat with tools: calls come out of the text
  size_t calls_sent = 0;
};

// New answer text through the tool-call parser: the content to show, and the calls completed
// since `sent` (each sent once, whole, as Ollama does). A repeated call stops the answer.
std::string take_tool_text(ToolCallParser& p, GenerationJob& job, engine::Delta& d, size_t& sent,
                           std::vector<ToolCall>& completed) {
  const std::string content = content_of(parse_delta(p, job, 0, d));
  for (; sent < p.calls().size() && p.calls()[sent].complete; ++sent) completed.push_back(p.calls()[sent]);
  return content;
}

constexpr std::chrono::milliseconds kWaitSlice{100};

bool pump(NdjsonStream& s, http::StreamSink& sink) {
  int32_t choice = 0;
  engine::Delta d;
  // Nothing to send yet: return and be called again (NDJSON has no comment line for a keep-alive;
  // a client that left is noticed at the first write).
  if (!s.job->wait_ready(kWaitSlice)) return true;
  if (!s.job->next(choice, d)) return false;
  std::string out;
  std::vector<ToolCall> calls;
  if (s.tools) d.text = take_tool_text(*s.tools, *s.job, d, s.calls_sent, calls);
  const bool done = d.finish != engine::FinishReason::None;
  if (!d.text.empty() || !calls.empty())
    out += ollama::chunk(s.is_chat, s.model, d.text, false, engine::FinishReason::None, nullptr, calls).dump() + "\n";
  if (done) {
    const auto usage = s.job->usage();
    const ollama::Stats stats{usage.prompt_tokens, usage.completion_tokens, d.timings};
    out += ollama::chunk(s.is_chat, s.model, "", true, d.finish, &stats).dump() + "\n";
  }
  if (!out.empty() && !sink.write(out)) {
    s.job->abort_all();
    return false;
  }
  return !done;
}

void handle_generation(ServerState& st, const http::Request& req, http::Response& res, bool is_chat) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  JsonBody body = json_body(req);
  std::string entry_template;
  if (auto e = apply_catalog(st, *b, body.doc, is_chat, &entry_template)) return send_ollama_error(res, *e);
  std::optional<chat::ChatFormatter> entry_chat;
  if (!entry_template.empty()) {
    auto f = chat::ChatFormatter::for_model(b->model->gguf(), *b->tokenizer, entry_template);
    if (!f) return send_ollama_error(res, ApiError{.status = 500, .message = "the model's template: " + f.error()});
    entry_chat = std::move(*f);
  }
  auto r = is_chat ? ollama::parse_chat(std::move(body)) : ollama::parse_generate(std::move(body));
  if (!r) return send_ollama_error(res, r.error());
  const std::string model = r->gen.model;
  if (!ollama::same_model(model, st.options.served_model_name)) {
    constexpr std::string_view kLatest = ":latest";
    r->gen.model = model.ends_with(kLatest) ? model.substr(0, model.size() - kLatest.size()) : model;
    if (select_model(r->gen, st, *b) || !r->gen.adapter)
      return send_ollama_error(res, ApiError{.status = 404, .message = "model '" + model + "' not found"});
  }
  // An empty generate request only asks for the model to be loaded (it is).
  if (!is_chat && r->prompt.empty() && r->messages.size() == 1) {
    ordered_json out = ollama::chunk(false, model, "", true);
    out["done_reason"] = "load";
    return send_json(res, 200, out);
  }
  apply_tenancy(st.options.slo, req, r->gen);
  ChatPrompt prompt;
  if (!is_chat && r->raw) {
    if (auto e = check_text_length(r->prompt.size(), *b->tokenizer, b->max_model_len, Endpoint::completions))
      return send_ollama_error(res, *e);
    prompt.ids = b->tokenizer->encode(r->prompt);
    auto max_tokens = check_prompt(prompt.ids, r->gen, Endpoint::chat, *b->tokenizer, b->max_model_len, b->default_max_tokens);
    if (!max_tokens) return send_ollama_error(res, max_tokens.error());
    prompt.max_tokens = *max_tokens;
  }
  auto grammar = request_grammar(r->gen, *b->grammars);
  if (!grammar) return send_ollama_error(res, grammar.error());
  // Tools ("auto", as Ollama): the call grammar from the moment the model starts a call.
  auto setup = prepare_tools(*b, r->tool_list, ToolChoice{}, /*parallel=*/true, r->gen.format, r->messages, *grammar);
  if (!setup) return send_ollama_error(res, setup.error());
  if (is_chat || !r->raw) {
    auto p = chat_prompt(*b, r->messages, chat::ChatRenderOptions{.tools = r->tools}, r->gen, "messages",
                         entry_chat ? &*entry_chat : nullptr);
    if (!p) return send_ollama_error(res, p.error());
    prompt = std::move(*p);
  }
  const uint64_t seed = r->gen.sampling.seed ? *r->gen.sampling.seed : random_seed();
  std::vector<engine::GenerationParams> params;
  params.push_back(engine_params(r->gen, std::move(prompt.ids), prompt.max_tokens, seed, 0, *grammar));
  params.back().grammar_trigger = setup->trigger;
  auto guard = std::make_shared<ActiveGuard>(st);
  auto job = GenerationJob::submit(*b->engine, st.metrics, std::move(params), {0}, kv_fetch_for(*b, req));
  if (!job) return send_ollama_error(res, job.error());

  std::optional<ToolCallParser> parser;
  if (setup->context) parser = setup->context->parser();
  if (!r->gen.stream) {
    std::string text;
    std::vector<ToolCall> calls;
    size_t sent = 0;
    engine::Delta d, last;
    int32_t choice = 0;
    for (;;) {
      if (req.client_gone()) return (*job)->abort_all();
      if (!(*job)->wait_ready(kWaitSlice)) continue;
      if (!(*job)->next(choice, d)) break;
      if (parser) d.text = take_tool_text(*parser, **job, d, sent, calls);
      text += d.text;
      if (d.finish != engine::FinishReason::None) last = d;
    }
    const auto usage = (*job)->usage();
    const ollama::Stats stats{usage.prompt_tokens, usage.completion_tokens, last.timings};
    return send_json(res, 200, ollama::chunk(is_chat, model, text, true, last.finish, &stats, calls));
  }
  auto s = std::make_shared<NdjsonStream>();
  s->guard = std::move(guard);
  s->job = std::move(*job);
  s->model = model;
  s->is_chat = is_chat;
  s->tools = std::move(parser);
  stream_body(res, "application/x-ndjson", [s](http::StreamSink& sink) { return pump(*s, sink); },
              [s] { s->job->abort_all(); });
}

}  // namespace

void send_ollama_error(http::Response& res, const ApiError& e) {
  send_json(res, e.status, ordered_json{{"error", e.message}});
  if (e.retry_after_s > 0) res.headers.set("Retry-After", std::to_string(e.retry_after_s));
}

ordered_json ollama_details(const Backend& b) { return details(b); }

ordered_json ollama_model_entry(const Backend& b, const std::string& name) {
  const FileInfo f = file_info(b);
  return ordered_json{{"name", name}, {"model", name}, {"modified_at", f.modified_at}, {"size", f.size}, {"details", details(b)}};
}

void register_ollama_routes(http::Router& router, ServerState& st) {
  using Req = http::Request;
  using Res = http::Response;
  const http::RouteOptions quick{.run = http::Run::io_thread};
  const http::RouteOptions json_post{.run = http::Run::worker, .json_body = true};
  router.add("POST", "/api/generate", [&st](const Req& req, Res& res) { handle_generation(st, req, res, false); },
             json_post);
  router.add("POST", "/api/chat", [&st](const Req& req, Res& res) { handle_generation(st, req, res, true); }, json_post);
  router.add("GET", "/api/tags", [&st](const Req&, Res& res) {
    if (Backend* b = serving_backend(st, res))
      send_json(res, 200, ordered_json{{"models", ollama_tags(st, *b)}});
  }, quick);
  router.add("GET", "/api/ps", [&st](const Req&, Res& res) {
    if (Backend* b = serving_backend(st, res)) {
      ordered_json m = model_entry(st, *b);
      m["expires_at"] = "2100-01-01T00:00:00Z";  // loaded for the server's lifetime
      m["size_vram"] = 0;
      send_json(res, 200, ordered_json{{"models", ordered_json::array({std::move(m)})}});
    }
  }, quick);
  router.add("POST", "/api/show", [&st](const Req& req, Res& res) { handle_show(st, req, res); }, json_post);
  router.add("GET", "/api/version", [](const Req&, Res& res) {
    send_json(res, 200, ordered_json{{"version", kOllamaApiVersion}});
  }, quick);
}

}  // namespace kvasir::server
