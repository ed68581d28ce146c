// vLLM's run-time LoRA routes: POST /v1/load_lora_adapter {"lora_name", "lora_path", "scale"?}
// and POST /v1/unload_lora_adapter {"lora_name"}. They read files the request names, so they
// answer only where serve was started with --allow-runtime-lora (vLLM: an environment
// variable); otherwise 403 saying so.
#include "server/admission.h"
#include "server/http_util.h"
#include "server/routes.h"

namespace kvasir::server {
namespace {

// The string field `key` of the body, or a 400 naming it.
Parsed<std::string> string_field(const ordered_json& doc, const char* key) {
  auto it = doc.find(key);
  if (it == doc.end() || !it->is_string() || it->get<std::string>().empty())
    return bad_request(std::string("'") + key + "' must be a non-empty string", key);
  return it->get<std::string>();
}

Backend* lora_backend(ServerState& st, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (b && !st.options.allow_runtime_lora) {
    send_error(res, ApiError{.status = 403,
                             .message = "loading LoRA adapters at run time is off: start serve with --allow-runtime-lora",
                             .type = "permission_error",
                             .code = "runtime_lora_disabled"});
    return nullptr;
  }
  return b;
}

void send_text(http::Response& res, std::string text) {
  res.status = 200;
  res.set_content(std::move(text), "text/plain; charset=utf-8");
}

void handle_load(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = lora_backend(st, res);
  if (!b) return;
  const ordered_json doc = json_body(req).doc;
  if (auto e = only_fields(doc, {"lora_name", "lora_path", "scale", "load_inplace"})) return send_error(res, *e);
  auto name = string_field(doc, "lora_name");
  if (!name) return send_error(res, name.error());
  auto path = string_field(doc, "lora_path");
  if (!path) return send_error(res, path.error());
  float scale = 1.f;
  if (auto it = doc.find("scale"); it != doc.end()) {
    if (!it->is_number()) return send_error(res, bad_request("'scale' must be a number", "scale"));
    scale = it->get<float>();
  }
  if (auto it = doc.find("load_inplace"); it != doc.end() && it->is_boolean() && it->get<bool>())
    (void)b->loras->unload(*name);  // vLLM: replace an adapter of that name
  if (auto s = b->loras->load(*name, *path, scale, b->engine->runner(), st.options.served_model_name); !s)
    return send_error(res, bad_request(s.error(), "lora_path", "invalid_lora"));
  send_text(res, "Success: LoRA adapter '" + *name + "' added successfully.");
}

void handle_unload(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = lora_backend(st, res);
  if (!b) return;
  const ordered_json doc = json_body(req).doc;
  if (auto e = only_fields(doc, {"lora_name", "lora_int_id"})) return send_error(res, *e);
  auto name = string_field(doc, "lora_name");
  if (!name) return send_error(res, name.error());
  if (auto s = b->loras->unload(*name); !s)
    return send_error(res, ApiError{.status = 404, .message = s.error(), .param = "lora_name", .code = "lora_not_found"});
  send_text(res, "Success: LoRA adapter '" + *name + "' removed successfully.");
}

}  // namespace

void register_lora_routes(http::Router& router, ServerState& st) {
  using Req = http::Request;
  using Res = http::Response;
  const http::RouteOptions json_post{.run = http::Run::worker, .json_body = true};
  router.add("POST", "/v1/load_lora_adapter", [&st](const Req& req, Res& res) { handle_load(st, req, res); }, json_post);
  router.add("POST", "/v1/unload_lora_adapter", [&st](const Req& req, Res& res) { handle_unload(st, req, res); }, json_post);
}

}  // namespace kvasir::server
