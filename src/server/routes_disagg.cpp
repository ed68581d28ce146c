// Prefill/decode disaggregation on the HTTP side: POST /internal/kv/prefill (a prefill
// instance computes a prompt and pushes its KV to the decode instance that asks), and the hook
// that makes a decode instance pull a prompt's KV first when the router names a prefill instance
// (the X-Kvasir-Prefill header).
#include "server/admission.h"
#include "server/http_util.h"
#include "server/routes.h"

namespace kvasir::server {
namespace {

void handle_prefill(ServerState& st, const http::Request& req, http::Response& res) {
  Backend* b = serving_backend(st, res);
  if (!b) return;
  if (!b->pusher)
    return send_error(res, api_error(ErrorCode::not_found, "this instance does not serve --role prefill"));
  auto r = disagg::parse_prefill_request(json_body(req).doc);
  if (!r) return send_error(res, api_error(r.error_code(), r.error()));
  for (int32_t t : r->tokens)
    if (t >= b->tokenizer->n_vocab())
      return send_error(res, api_error(ErrorCode::invalid_argument, "prefill request: a token id is outside the vocabulary"));
  auto done = b->pusher->push(*r);
  if (!done) return send_error(res, api_error(done.error_code(), done.error()));
  send_json(res, 200,
            ordered_json{{"blocks", done->n_blocks}, {"bytes", done->bytes}, {"prefill_ms", done->prefill_ms},
                         {"transfer_ms", done->transfer_ms}, {"tail_ms", done->tail_ms}});
}

}  // namespace

GenerationJob::KvFetch kv_fetch_for(Backend& b, const http::Request& req) {
  const std::string& prefill = req.header("x-kvasir-prefill");
  if (!b.puller || prefill.empty()) return {};
  return [&b, prefill](std::span<const int32_t> prompt, const std::string& salt) {
    const Status s = b.puller->pull(prompt, salt, prefill);
    if (!s) std::fprintf(stderr, "kvasir: KV from %s not used, computing the prompt here: %s\n", prefill.c_str(), s.error().c_str());
  };
}

void register_disagg_routes(http::Router& router, ServerState& st) {
  router.add("POST", "/internal/kv/prefill", [&st](const http::Request& req, http::Response& res) {
    handle_prefill(st, req, res);
  }, {.run = http::Run::worker, .json_body = true});
}

}  // namespace kvasir::server
