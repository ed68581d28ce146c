// Ollama's model management over the catalog (server/ollama_catalog.h): POST /api/create (a name
// over a model, with SYSTEM and PARAMETER defaults), POST /api/copy, DELETE /api/delete, POST
// /api/pull (a GGUF by reference, over `kvasir pull`'s downloader, with Ollama's streamed
// progress objects), and what generation, /api/tags and /api/show read from it.
#include <filesystem>

#include "hub/download.h"
#include "hub/model_ref.h"
#include "server/admission.h"
#include "server/generation.h"
#include "server/http_util.h"
#include "server/ollama_catalog.h"
#include "server/ollama_protocol.h"
#include "server/ollama_routes.h"
#include "server/routes.h"

namespace kvasir::server {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxDepth = 8;  // entries derived from entries

bool is_served(const ServerState& st, const std::string& name) {
  return normalize_model_name(name) == st.options.served_model_name;
}

ApiError not_found(const std::string& name) { return ApiError{.status = 404, .message = "model '" + name + "' not found"}; }

std::optional<ApiError> bad_field(const ordered_json& doc, std::initializer_list<std::string_view> known) {
  if (!doc.is_object()) return bad_request("the body must be a JSON object");
  for (const auto& [k, v] : doc.items()) {
    bool ok = false;
    for (auto f : known) ok |= k == f;
    if (!ok && !v.is_null() && !(v.is_object() && v.empty()) && !(v.is_array() && v.empty()))
      return bad_request("unsupported field '" + k + "'", k);
  }
  return std::nullopt;
}

std::string string_of(const ordered_json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string now_rfc3339() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A GGUF file's content identity, or an error naming what is wrong with it.
Result<std::string> identity_of(const std::string& path) {
  auto m = Model::load(path);
  if (!m) return Error{m.error(), ErrorCode::invalid_argument};
  return (*m)->identity();
}

// One NDJSON line, or the whole answer when not streamed.
void write_status(http::StreamSink* sink, const ordered_json& j) {
  if (sink) sink->write(j.dump() + "\n");
}

// Runs `work` (which reports progress through the sink it is given, null when not streamed):
// streamed, as NDJSON lines ending with {"status": "success"} or {"error": ...}; otherwise as
// one object.
void run_management(http::Response& res, bool stream, std::function<std::optional<ApiError>(http::StreamSink*)> work) {
  if (!stream) {
    if (auto e = work(nullptr)) return send_ollama_error(res, *e);
    return send_json(res, 200, ordered_json{{"status", "success"}});
  }
  auto done = std::make_shared<bool>(false);
  stream_body(res, "application/x-ndjson", [work = std::move(work), done](http::StreamSink& sink) {
    if (*done) return false;
    *done = true;
    if (auto e = work(&sink)) write_status(&sink, ordered_json{{"error", e->message}});
    else write_status(&sink, ordered_json{{"status", "success"}});
    return false;
  }, [] {});
}

// POST /api/create {"model", "from", "system", "parameters", "license", "stream"}.
void handle_create(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  if (!b->catalog) return send_ollama_error(res, ApiError{.status = 503, .message = "no model catalog folder"});
  ordered_json doc = json_body(req).doc;
  if (auto e = bad_field(doc, {"model", "name", "from", "system", "parameters", "template", "license", "stream"}))
    return send_ollama_error(res, *e);
  std::string name = normalize_model_name(string_of(doc, "model").empty() ? string_of(doc, "name") : string_of(doc, "model"));
  if (!valid_model_name(name)) return send_ollama_error(res, bad_request("'model' must be a model name", "model"));
  if (is_served(st, name) || b->loras->find(name))
    return send_ollama_error(res, bad_request("'" + name + "' is the served model or one of its adapters", "model"));
  const std::string from = string_of(doc, "from");
  if (from.empty()) return send_ollama_error(res, bad_request("'from' must name a model or a GGUF file", "from"));
  CatalogEntry e{.name = name, .created_at = now_rfc3339()};
  e.system = string_of(doc, "system");
  if (auto it = doc.find("parameters"); it != doc.end() && !it->is_null()) {
    if (!it->is_object()) return send_ollama_error(res, bad_request("'parameters' must be an object", "parameters"));
    e.parameters = *it;
    // The options the generation routes take, checked now rather than at every request.
    ordered_json probe{{"model", "x"}, {"prompt", ""}, {"options", e.parameters}};
    if (auto r = ollama::parse_generate(JsonBody{probe}); !r) return send_ollama_error(res, r.error());
  }
  if (auto t = doc.find("template"); t != doc.end() && !t->is_null()) {
    if (!t->is_string()) return send_ollama_error(res, bad_request("'template' must be a string", "template"));
    const std::string tpl = t->get<std::string>();
    // Ollama's own templates are Go templates ({{ .Prompt }}, {{ range .Messages }}); kvasir renders Jinja.
    if (tpl.find("{{ .") != std::string::npos || tpl.find("{{.") != std::string::npos || tpl.find(".Messages") != std::string::npos ||
        tpl.find("{{- .") != std::string::npos)
      return send_ollama_error(res, bad_request("'template': Go templates are not supported; give a Jinja chat template "
                                                "(as GGUF's tokenizer.chat_template)", "template"));
    auto f = chat::ChatFormatter::for_model(b->model->gguf(), *b->tokenizer, tpl);
    Result<std::string> probe = f ? f->render(ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), {})
                                  : Result<std::string>(Error{f.error()});
    if (!probe) return send_ollama_error(res, bad_request("'template': " + probe.error(), "template"));
    e.chat_template = tpl;
  }
  const bool stream = !doc.contains("stream") || doc["stream"] != false;
  run_management(res, stream, [&st, b, e, from](http::StreamSink* sink) mutable -> std::optional<ApiError> {
    if (is_served(st, from) || b->loras->find(normalize_model_name(from)) || b->catalog->find(from)) {
      e.from = normalize_model_name(from);
    } else if (from.ends_with(".gguf") && fs::path(from).is_absolute()) {  // Modelfile's FROM /path/model.gguf
      write_status(sink, ordered_json{{"status", "parsing GGUF"}});
      std::error_code ec;
      if (!fs::is_regular_file(from, ec)) return bad_request("'from': no GGUF file at that path", "from");
      auto id = identity_of(from);
      if (!id) return bad_request("'from': " + id.error(), "from");
      e.path = from, e.identity = *id;
    } else {
      return ApiError{.status = 404, .message = "model '" + from + "' not found", .param = "from"};
    }
    write_status(sink, ordered_json{{"status", "writing manifest"}});
    if (auto s = b->catalog->put(e); !s) return ApiError{.status = 500, .message = s.error()};
    return std::nullopt;
  });
}

// POST /api/copy {"source", "destination"}: 200 with an empty body.
void handle_copy(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  if (!b->catalog) return send_ollama_error(res, ApiError{.status = 503, .message = "no model catalog folder"});
  const ordered_json doc = json_body(req).doc;
  if (auto e = bad_field(doc, {"source", "destination"})) return send_ollama_error(res, *e);
  const std::string src = normalize_model_name(string_of(doc, "source"));
  const std::string dst = normalize_model_name(string_of(doc, "destination"));
  if (!valid_model_name(dst)) return send_ollama_error(res, bad_request("'destination' must be a model name", "destination"));
  if (is_served(st, dst) || b->loras->find(dst))
    return send_ollama_error(res, bad_request("'" + dst + "' is the served model or one of its adapters", "destination"));
  CatalogEntry e{.name = dst, .created_at = now_rfc3339()};
  if (auto found = b->catalog->find(src)) {
    e = *found;
    e.name = dst, e.created_at = now_rfc3339();
  } else if (is_served(st, src) || b->loras->find(src)) {
    e.from = src;
  } else {
    return send_ollama_error(res, not_found(src));
  }
  if (auto s = b->catalog->put(e); !s) return send_ollama_error(res, ApiError{.status = 500, .message = s.error()});
  res.status = 200;
}

// DELETE /api/delete {"model"}: the entry, and a pulled file no other entry names.
void handle_delete(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  if (!b->catalog) return send_ollama_error(res, ApiError{.status = 503, .message = "no model catalog folder"});
  const ordered_json doc = json_body(req).doc;
  if (auto e = bad_field(doc, {"model", "name"})) return send_ollama_error(res, *e);
  const std::string name = normalize_model_name(string_of(doc, "model").empty() ? string_of(doc, "name") : string_of(doc, "model"));
  if (is_served(st, name) || b->loras->find(name))
    return send_ollama_error(res, bad_request("'" + name + "' is being served and cannot be deleted", "model"));
  auto entry = b->catalog->find(name);
  if (!entry) return send_ollama_error(res, not_found(name));
  if (auto s = b->catalog->remove(name); !s) return send_ollama_error(res, not_found(name));
  if (!entry->sha256.empty()) {  // pulled: its file goes when no entry names it any more
    bool named = false;
    for (const CatalogEntry& other : b->catalog->list()) named |= other.path == entry->path;
    std::error_code ec;
    const fs::path models = fs::weakly_canonical(fs::path(hub::cache_root()) / "models", ec);
    const fs::path file = fs::weakly_canonical(entry->path, ec);
    if (!named && file != fs::weakly_canonical(b->model->path(), ec) &&
        file.string().starts_with(models.string() + "/"))
      fs::remove(file, ec);
  }
  res.status = 200;
}

// POST /api/pull {"model": "hf://ORG/REPO/FILE.gguf" | "https://.../FILE.gguf" | a known name,
// "insecure", "stream"}: downloads into kvasir's cache (resumed, checksum verified) and adds an
// entry named after the reference.
void handle_pull(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  if (!b->catalog) return send_ollama_error(res, ApiError{.status = 503, .message = "no model catalog folder"});
  const ordered_json doc = json_body(req).doc;
  if (auto e = bad_field(doc, {"model", "name", "insecure", "stream"})) return send_ollama_error(res, *e);
  const std::string ref = string_of(doc, "model").empty() ? string_of(doc, "name") : string_of(doc, "model");
  const bool stream = !doc.contains("stream") || doc["stream"] != false;
  if (is_served(st, ref) || b->loras->find(normalize_model_name(ref)) || b->catalog->find(ref))
    return run_management(res, stream, [](http::StreamSink* sink) -> std::optional<ApiError> {
      write_status(sink, ordered_json{{"status", "pulling manifest"}});
      return std::nullopt;  // already here
    });
  if (!hub::is_remote_ref(ref))
    return send_ollama_error(res, ApiError{.status = 404,
                                           .message = "model '" + ref + "' not found: pull takes hf://ORG/REPO/FILE.gguf "
                                                      "or an http(s) URL of a GGUF file"});
  auto parsed = hub::parse_model_ref(ref, hub::hf_endpoint());
  if (!parsed) return send_ollama_error(res, bad_request(parsed.error(), "model"));
  std::string name = parsed->display;
  for (std::string_view scheme : {"hf://", "https://", "http://"})
    if (name.starts_with(scheme)) name = (scheme == "hf://" ? "hf.co/" : "") + name.substr(scheme.size());
  if (!valid_model_name(normalize_model_name(name))) name = fs::path(parsed->cache_rel).filename().string();
  run_management(res, stream, [b, ref = *parsed, name](http::StreamSink* sink) -> std::optional<ApiError> {
    write_status(sink, ordered_json{{"status", "pulling manifest"}});
    const std::string dest = hub::cache_root() + "/models/" + ref.cache_rel;
    hub::DownloadOptions o;
    if (ref.is_hf)
      if (const char* t = std::getenv("HF_TOKEN"); t && *t) o.bearer_token = t;
    const std::string layer = "pulling " + fs::path(ref.cache_rel).filename().string();
    auto last = std::chrono::steady_clock::now() - std::chrono::seconds(1);
    o.progress = [&](uint64_t done, uint64_t total) {
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::milliseconds(200) && done != total) return;
      last = now;
      write_status(sink, ordered_json{{"status", layer}, {"total", total}, {"completed", done}});
    };
    std::string sha;
    std::error_code ec;
    if (fs::exists(dest, ec)) {
      auto s = hub::sha256_file(dest);
      if (!s) return ApiError{.status = 500, .message = s.error()};
      sha = *s;
    } else {
      auto r = hub::download(ref.url, dest, o);
      if (!r) return ApiError{.status = 502, .message = "pull " + ref.display + ": " + r.error()};
      sha = r->sha256;
    }
    write_status(sink, ordered_json{{"status", "verifying sha256 digest"}, {"digest", "sha256:" + sha}});
    auto id = identity_of(dest);
    if (!id) {
      fs::remove(dest, ec);
      return ApiError{.status = 400, .message = "pull " + ref.display + ": not a model kvasir can load: " + id.error()};
    }
    write_status(sink, ordered_json{{"status", "writing manifest"}});
    CatalogEntry e{.name = name, .path = dest, .identity = *id, .sha256 = sha, .created_at = now_rfc3339()};
    if (auto s = b->catalog->put(e); !s) return ApiError{.status = 500, .message = s.error()};
    return std::nullopt;
  });
}

}  // namespace

std::optional<ApiError> apply_catalog(const ServerState& st, const Backend& b, ordered_json& doc, bool is_chat,
                                      std::string* chat_template) {
  if (!b.catalog || !doc.is_object() || !doc.contains("model") || !doc["model"].is_string()) return std::nullopt;
  const std::string asked = doc["model"].get<std::string>();
  std::string name = asked, system;
  ordered_json params = ordered_json::object();
  bool matched = false;
  for (int depth = 0;; ++depth) {
    auto e = b.catalog->find(name);
    if (!e) break;
    if (depth == kMaxDepth) return ApiError{.status = 400, .message = "model '" + asked + "' derives from too many models"};
    matched = true;
    if (system.empty()) system = e->system;
    if (chat_template && chat_template->empty()) *chat_template = e->chat_template;
    for (const auto& [k, v] : e->parameters.items())
      if (!params.contains(k)) params[k] = v;
    if (!e->path.empty()) {
      if (e->identity != b.model->identity())
        return ApiError{.status = 404,
                        .message = "model '" + asked + "' is here but not loaded: this server serves '" +
                                   st.options.served_model_name + "'; start `kvasir serve` with that model's file"};
      name = st.options.served_model_name;
      break;
    }
    name = e->from;
  }
  if (!matched) return std::nullopt;
  doc["model"] = name;
  if (!params.empty()) {
    ordered_json& options = doc["options"];
    if (options.is_null()) options = ordered_json::object();
    if (options.is_object())
      for (const auto& [k, v] : params.items())
        if (!options.contains(k)) options[k] = v;
  }
  if (!system.empty()) {
    if (is_chat) {
      ordered_json& messages = doc["messages"];
      if (messages.is_array()) {
        bool has_system = false;
        for (const auto& m : messages) has_system |= m.is_object() && m.contains("role") && m["role"] == "system";
        if (!has_system) messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", system}});
      }
    } else if ((!doc.contains("system") || doc["system"].is_null()) && !(doc.contains("raw") && doc["raw"] == true)) {
      doc["system"] = system;
    }
  }
  return std::nullopt;
}

ordered_json ollama_tags(const ServerState& st, const Backend& b) {
  ordered_json out = ordered_json::array({ollama_model_entry(b, st.options.served_model_name + ":latest")});
  for (const LoraEntry& e : b.loras->list()) out.push_back(ollama_model_entry(b, e.name + ":latest"));
  if (!b.catalog) return out;
  for (const CatalogEntry& e : b.catalog->list()) {
    ordered_json m = ollama_model_entry(b, e.name + (e.name.find(':') == std::string::npos ? ":latest" : ""));
    m["modified_at"] = e.created_at;
    if (!e.path.empty()) {  // a file of its own: its size and digest, not the served model's details
      std::error_code ec;
      m["size"] = int64_t(fs::file_size(e.path, ec));
      if (ec) m["size"] = 0;
      if (e.identity != b.model->identity()) m["details"] = ordered_json{{"format", "gguf"}};
    }
    if (!e.sha256.empty()) m["digest"] = e.sha256;
    out.push_back(std::move(m));
  }
  return out;
}

void register_ollama_model_routes(http::Router& router, ServerState& st) {
  using Req = http::Request;
  using Res = http::Response;
  const http::RouteOptions json_post{.run = http::Run::worker, .json_body = true};
  router.add("POST", "/api/create", [&st](const Req& req, Res& res) { handle_create(st, req, res); }, json_post);
  router.add("POST", "/api/copy", [&st](const Req& req, Res& res) { handle_copy(st, req, res); }, json_post);
  router.add("DELETE", "/api/delete", [&st](const Req& req, Res& res) { handle_delete(st, req, res); }, json_post);
  router.add("POST", "/api/pull", [&st](const Req& req, Res& res) { handle_pull(st, req, res); }, json_post);
}

}  // namespace kvasir::server
