// The server's side of the one admission path (http/router.h): the steps it plugs into the
// router, and how a handler gets the body that admission parsed. Every route passes them, in
// order, before its handler: the transport's body-size limit (413), Host/Origin/CORS (400, 403),
// the API key (401, unless the route is registered http::Auth::open), the media type (415), then
// for JSON routes the depth pre-scan and the parse (400 json_too_deep / invalid_json). Errors on
// Ollama's routes (/api/...) come in Ollama's shape, {"error": "message"}.
#pragma once
#include "http/router.h"
#include "server/access.h"
#include "server/protocol.h"

namespace kvasir::server {

// After a request body this large, the worker gives freed memory back to the system (malloc_trim).
inline constexpr size_t kTrimAfterBodyBytes = 1u << 20;

// The admission steps for `router`, checking keys, Host and Origin with `access` (which must
// outlive the router).
http::Router::Admission make_admission(const AccessPolicy& access);

// The body admission parsed, moved out for the protocol's parsers (call it once). A request that
// never passed admission (no router) is parsed now; if that fails the parsers see a null, not an
// object, and answer 400.
JsonBody json_body(const http::Request& req);

// Whether `path` is one of Ollama's routes, whose errors are {"error": "message"}.
bool ollama_path(const std::string& path);
// An error in the shape the route's API uses.
http::Response route_error(const http::Request& req, const ApiError& error);

}  // namespace kvasir::server
