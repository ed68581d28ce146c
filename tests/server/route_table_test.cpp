// The route table as the server builds it (register_routes): every registered route is walked,
// and each must pass admission before its handler: without the key a 401; with it, a body nested
// too deep or not JSON is a 400 from admission, never the handler's answer (which, with no model
// loaded, would be a 503). A route registered without authentication or without the body check
// fails here unless it is one of the few documented open ones.
#include <gtest/gtest.h>

#include <set>

#include "server/admission.h"
#include "server/routes.h"

namespace kvasir::server {
namespace {

constexpr const char* kKey = "route-table-key";

http::Request request(const http::RouteInfo& route, std::string body, bool with_key) {
  http::Request r;
  r.method = route.method;
  r.target = route.path;
  r.path = route.path;
  r.headers.add("Content-Type", "application/json");
  if (with_key) r.headers.add("Authorization", std::string("Bearer ") + kKey);
  r.body = std::move(body);
  return r;
}

// The request through the router as the transport runs it: inline first, then on a worker.
http::Response serve(http::Router& router, http::Request req) {
  http::Response res;
  if (!router.handle_inline(req, res)) router.handle(req, res);
  return res;
}

// The error's machine-readable code on the OpenAI routes; Ollama's shape has only a message.
std::string error_text(const http::Response& res) {
  const ordered_json body = ordered_json::parse(res.body, nullptr, false);
  if (!body.is_object() || !body.contains("error")) return "";
  const ordered_json& e = body["error"];
  return e.is_string() ? e.get<std::string>() : e.value("code", "") + " " + e.value("message", "");
}

struct Table {
  explicit Table(bool metrics_public = false)
      : state(ServerOptions{.access = {.api_keys = {kKey}, .metrics_public = metrics_public},
                            .served_model_name = "m"}),
        access(state.options.access) {
    register_routes(router, state, access);
  }
  ServerState state;  // no model: a handler that runs answers 503
  AccessPolicy access;
  http::Router router;
};

std::set<std::string> open_routes(const http::Router& router) {
  std::set<std::string> out;
  for (const http::RouteInfo& r : router.routes())
    if (r.options.auth == http::Auth::open) out.insert(r.method + " " + r.path);
  return out;
}

TEST(RouteTable, EveryRouteAuthenticatesAndAdmitsItsBodyBeforeTheHandler) {
  Table t;
  const std::vector<http::RouteInfo> routes = t.router.routes();
  ASSERT_GE(routes.size(), 18u);  // OpenAI, Ollama, Responses, tokenize, info
  const std::string deep = "{\"input\":" + std::string(150000, '[') + std::string(150000, ']') + "}";
  int posts = 0;
  for (const http::RouteInfo& route : routes) {
    const std::string name = route.method + " " + route.path;
    const bool open = route.options.auth == http::Auth::open;
    http::Response anon = serve(t.router, request(route, route.method == "POST" ? deep : "", false));
    if (open) {
      EXPECT_NE(anon.status, 401) << name;
    } else {
      EXPECT_EQ(anon.status, 401) << name;
      EXPECT_EQ(anon.headers.get("WWW-Authenticate"), "Bearer") << name;
    }
    if (route.method != "POST") {
      EXPECT_NE(serve(t.router, request(route, "", true)).status, 401) << name;
      continue;
    }
    ++posts;
    EXPECT_TRUE(route.options.json_body) << name << " takes a body that admission does not check";
    http::Response too_deep = serve(t.router, request(route, deep, true));
    EXPECT_EQ(too_deep.status, 400) << name;
    EXPECT_NE(error_text(too_deep).find(ollama_path(route.path) ? "levels deep" : "json_too_deep"), std::string::npos)
        << name << ": " << too_deep.body.substr(0, 200);
    http::Response broken = serve(t.router, request(route, "{\"model\": ", true));
    EXPECT_EQ(broken.status, 400) << name;
    EXPECT_NE(error_text(broken).find("not valid JSON"), std::string::npos) << name << ": " << broken.body;
    // A well-formed body reaches the handler (no model here: 503).
    EXPECT_EQ(serve(t.router, request(route, "{}", true)).status, 503) << name;
  }
  EXPECT_GE(posts, 11);
  // The only routes open without the key (docs/API.md, "Authentication").
  EXPECT_EQ(open_routes(t.router), (std::set<std::string>{"GET /", "GET /health"}));
  EXPECT_EQ(open_routes(Table(/*metrics_public=*/true).router),
            (std::set<std::string>{"GET /", "GET /health", "GET /metrics"}));
}

TEST(RouteTable, UnknownPathsNeedTheKeyToo) {
  Table t;
  const http::RouteInfo nowhere{"GET", "/api/nowhere", {}};
  EXPECT_EQ(serve(t.router, request(nowhere, "", false)).status, 401);
  EXPECT_EQ(serve(t.router, request(nowhere, "", true)).status, 404);
}

TEST(RouteTable, OllamaRoutesAnswerInOllamasShape) {
  Table t;
  const http::RouteInfo embed{"POST", "/api/embed", {}};
  http::Response res = serve(t.router, request(embed, "{}", false));
  EXPECT_EQ(res.status, 401);
  const ordered_json body = ordered_json::parse(res.body);
  ASSERT_TRUE(body["error"].is_string()) << res.body;
  EXPECT_NE(body["error"].get<std::string>().find("API key"), std::string::npos);
}

}  // namespace
}  // namespace kvasir::server
