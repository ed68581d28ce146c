// The access checks: API keys (which key matched, constant work whatever the key), Host and
// Origin rules, the CORS preflight.
#include <gtest/gtest.h>

#include "server/access.h"

namespace kvasir::server {
namespace {

http::Request request(std::string method, std::string path, std::vector<std::pair<std::string, std::string>> headers = {}) {
  http::Request r;
  r.method = std::move(method);
  r.target = path;
  r.path = std::move(path);
  for (auto& [n, v] : headers) r.headers.add(n, v);
  return r;
}

TEST(ApiKeys, TheMatchingKeyIsFound) {
  const std::vector<std::string> keys = {"alpha-key", "beta", "gamma-longer-key"};
  EXPECT_EQ(match_api_key("Bearer alpha-key", keys), 0u);
  EXPECT_EQ(match_api_key("Bearer beta", keys), 1u);
  EXPECT_EQ(match_api_key("bearer gamma-longer-key", keys), 2u);  // the scheme is case-insensitive
  for (const char* wrong : {"", "Bearer", "Bearer ", "alpha-key", "Bearer alpha-ke", "Bearer alpha-keyy",
                            "Bearer betabeta", "Bearer bet", "Basic alpha-key", "Bearer Alpha-key"})
    EXPECT_FALSE(match_api_key(wrong, keys).has_value()) << wrong;
  // A token that repeats the key (the comparison walks the token modulo the key) is not the key.
  EXPECT_FALSE(match_api_key("Bearer betabetabeta", keys).has_value());
  EXPECT_FALSE(match_api_key("Bearer beta", {}).has_value());
}

TEST(Access, AuthenticationNeedsOneOfTheKeysWhenThereAreAny) {
  // Which routes need it is the route table's to say (route_table_test.cpp); here only the key.
  AccessPolicy p(AccessOptions{.api_keys = {"k1", "k2"}});
  for (const char* auth : {"", "Bearer k3", "Bearer ", "k1"}) {
    http::Request r = request("GET", "/api/tags", {{"Authorization", auth}});
    http::Response res;
    EXPECT_TRUE(p.authenticate(r, res)) << auth;
    EXPECT_EQ(res.status, 401) << auth;
    EXPECT_EQ(res.headers.get("WWW-Authenticate"), "Bearer");
    EXPECT_EQ(r.principal, "");
  }
  http::Request ok = request("GET", "/v1/models", {{"Authorization", "Bearer k2"}});
  http::Response res;
  EXPECT_FALSE(p.authenticate(ok, res));
  EXPECT_EQ(ok.principal, key_label(1));
  // The screen (Host, Origin) never asks for a key.
  http::Request anon = request("GET", "/v1/models");
  EXPECT_FALSE(p.screen(anon, res));
  AccessPolicy none(AccessOptions{});
  http::Request open = request("POST", "/v1/completions");
  EXPECT_FALSE(none.authenticate(open, res));
  EXPECT_EQ(open.principal, "");
}

TEST(Access, LoopbackServersAnswerOnlyToLoopbackHosts) {
  AccessPolicy p(AccessOptions{.listen_host = "127.0.0.1"});
  for (const char* host : {"127.0.0.1:8080", "localhost", "localhost:1", "[::1]:8080", ""}) {
    http::Request r = request("GET", "/health", {{"Host", host}});
    http::Response res;
    EXPECT_FALSE(p.screen(r, res)) << host;
  }
  for (const char* host : {"evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.nip.io"}) {
    http::Request r = request("GET", "/health", {{"Host", host}});
    http::Response res;
    EXPECT_TRUE(p.screen(r, res)) << host;
    EXPECT_EQ(res.status, 400) << host;
  }
  // What follows the name must be a port: anything else matches no allowed name.
  for (const char* host : {"[::1]x", "[::1]:", "[::1", "localhost:x", "localhost:80:80", "127.0.0.1:1234567"}) {
    http::Request r = request("GET", "/health", {{"Host", host}});
    http::Response res;
    EXPECT_TRUE(p.screen(r, res)) << host;
    EXPECT_EQ(res.status, 400) << host;
  }
  AccessPolicy any(AccessOptions{.listen_host = "0.0.0.0"});
  http::Request r = request("GET", "/health", {{"Host", "my-server.lan:8080"}});
  http::Response res;
  EXPECT_FALSE(any.screen(r, res));
  AccessPolicy listed(AccessOptions{.allowed_hosts = {"api.example"}, .listen_host = "0.0.0.0"});
  http::Request bad = request("GET", "/health", {{"Host", "other.example"}});
  EXPECT_TRUE(listed.screen(bad, res));
  http::Request good = request("GET", "/health", {{"Host", "API.example:443"}});
  EXPECT_FALSE(listed.screen(good, res));
}

TEST(Access, OriginsAndThePreflight) {
  AccessPolicy p(AccessOptions{.cors_origins = {"http://app.example"}});
  http::Response res;
  http::Request same = request("POST", "/v1/completions", {{"Host", "127.0.0.1:8080"}, {"Origin", "http://127.0.0.1:8080"}});
  EXPECT_FALSE(p.screen(same, res));  // our own page
  http::Request foreign = request("POST", "/v1/completions", {{"Host", "127.0.0.1:8080"}, {"Origin", "http://evil.example"}});
  EXPECT_TRUE(p.screen(foreign, res));
  EXPECT_EQ(res.status, 403);
  http::Request pre = request("OPTIONS", "/v1/completions",
                              {{"Host", "127.0.0.1:8080"}, {"Origin", "http://app.example"},
                               {"Access-Control-Request-Method", "POST"}});
  res = http::Response{};
  ASSERT_TRUE(p.screen(pre, res));
  p.decorate(pre, res);
  EXPECT_EQ(res.status, 204);
  EXPECT_EQ(res.headers.get("Access-Control-Allow-Origin"), "http://app.example");
  EXPECT_NE(res.headers.get("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
  // Same-origin and non-browser responses carry no CORS headers.
  http::Response plain;
  p.decorate(same, plain);
  EXPECT_FALSE(plain.headers.has("Access-Control-Allow-Origin"));
}

}  // namespace
}  // namespace kvasir::server
