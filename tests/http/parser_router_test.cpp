// The request parser (limits, pipelining, chunked bodies, malformed input) and the router (404,
// 405 with Allow, 415, filters, which thread a route runs on).
#include <gtest/gtest.h>

#include <string>

#include "http/request_parser.h"
#include "http/router.h"

namespace kvasir::http {
namespace {

using Kind = ParseResult::Kind;

TEST(RequestParser, ParsesAWholeRequest) {
  const std::string raw =
      "POST /v1/completions?x=1 HTTP/1.1\r\nHost: localhost\r\ncontent-type: application/json\r\n"
      "Content-Length: 13\r\n\r\n{\"prompt\":1}\n";
  ParseResult r = parse_request(raw, Limits{});
  ASSERT_EQ(r.kind, Kind::complete);
  EXPECT_EQ(r.consumed, raw.size());
  EXPECT_EQ(r.request.method, "POST");
  EXPECT_EQ(r.request.target, "/v1/completions?x=1");
  EXPECT_EQ(r.request.path, "/v1/completions");
  EXPECT_EQ(r.request.header("Content-Type"), "application/json");  // names compare case-insensitively
  EXPECT_EQ(r.request.body, "{\"prompt\":1}\n");
  EXPECT_TRUE(r.request.keep_alive);
}

TEST(RequestParser, IncompleteUntilTheBodyIsThere) {
  const std::string raw = "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345";
  EXPECT_EQ(parse_request(raw, Limits{}).kind, Kind::incomplete);
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nHost: a", Limits{}).kind, Kind::incomplete);
}

TEST(RequestParser, PipelinedRequestsAreReadOneAtATime) {
  const std::string one = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
  const std::string two = "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  ParseResult r = parse_request(one + two, Limits{});
  ASSERT_EQ(r.kind, Kind::complete);
  EXPECT_EQ(r.consumed, one.size());
  ParseResult s = parse_request(std::string_view(one + two).substr(r.consumed), Limits{});
  ASSERT_EQ(s.kind, Kind::complete);
  EXPECT_EQ(s.request.path, "/metrics");
  EXPECT_FALSE(s.request.keep_alive);
}

TEST(RequestParser, ChunkedBodiesAreJoined) {
  const std::string raw =
      "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n3;ext=1\r\nefg\r\n0\r\n\r\n";
  ParseResult r = parse_request(raw, Limits{});
  ASSERT_EQ(r.kind, Kind::complete);
  EXPECT_EQ(r.request.body, "abcdefg");
}

TEST(RequestParser, BodyBeyondTheLimitIs413EvenWhenChunked) {
  Limits limits{.max_header_bytes = 4096, .max_body_bytes = 8};
  ParseResult declared = parse_request("POST /x HTTP/1.1\r\nContent-Length: 9\r\n\r\n", limits);
  ASSERT_EQ(declared.kind, Kind::failed);
  EXPECT_EQ(declared.failure.status, 413);
  ParseResult chunked = parse_request(
      "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n5\r\nfghij\r\n0\r\n\r\n", limits);
  ASSERT_EQ(chunked.kind, Kind::failed);
  EXPECT_EQ(chunked.failure.status, 413);
  EXPECT_EQ(parse_request("POST /x HTTP/1.1\r\nContent-Length: 8\r\n\r\n12345678", limits).kind, Kind::complete);
}

TEST(RequestParser, HeadersBeyondTheLimitAre431) {
  Limits limits{.max_header_bytes = 256, .max_body_bytes = 1024};
  const std::string raw = "GET / HTTP/1.1\r\nX-Big: " + std::string(400, 'a') + "\r\n\r\n";
  ParseResult r = parse_request(raw, limits);
  ASSERT_EQ(r.kind, Kind::failed);
  EXPECT_EQ(r.failure.status, 431);
  // Also before the headers end: the limit holds on a request still arriving.
  ParseResult partial = parse_request("GET /" + std::string(400, 'b'), limits);
  ASSERT_EQ(partial.kind, Kind::failed);
  EXPECT_EQ(partial.failure.status, 431);
}

TEST(RequestParser, MalformedRequestsAre400) {
  for (const char* raw : {"GET / HTTP/9.9\r\n\r\n", "G@T / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
                          "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nab",
                          "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
    ParseResult r = parse_request(raw, Limits{});
    ASSERT_EQ(r.kind, Kind::failed) << raw;
    EXPECT_EQ(r.failure.status, 400) << raw;
    EXPECT_FALSE(r.failure.message.empty());
  }
}

Request request(std::string method, std::string path) {
  Request r;
  r.method = std::move(method);
  r.target = path;
  r.path = std::move(path);
  return r;
}

TEST(Router, UnknownPathIs404AndWrongMethodIs405WithAllow) {
  Router router;
  router.add("GET", "/a", [](const Request&, Response& res) { res.body = "a"; }, {.run = Run::io_thread});
  router.add("POST", "/a", [](const Request&, Response& res) { res.body = "post"; });
  Response res;
  Request missing = request("GET", "/nope");
  ASSERT_TRUE(router.handle_inline(missing, res));
  EXPECT_EQ(res.status, 404);
  Request wrong = request("DELETE", "/a");
  res = Response{};
  ASSERT_TRUE(router.handle_inline(wrong, res));
  EXPECT_EQ(res.status, 405);
  EXPECT_EQ(res.headers.get("Allow"), "GET, HEAD, POST");
  // HEAD is answered wherever GET is, without the body.
  Request head = request("HEAD", "/a");
  res = Response{};
  ASSERT_TRUE(router.handle_inline(head, res));
  EXPECT_EQ(res.status, 200);
  EXPECT_EQ(res.body, "");
}

TEST(Router, IoThreadRoutesAnswerInlineAndWorkerRoutesDoNot) {
  Router router;
  router.add("GET", "/quick", [](const Request&, Response& res) { res.body = "q"; }, {.run = Run::io_thread});
  router.add("POST", "/slow", [](const Request&, Response& res) { res.body = "s"; });
  Response res;
  Request quick = request("GET", "/quick");
  ASSERT_TRUE(router.handle_inline(quick, res));
  EXPECT_EQ(res.body, "q");
  Request slow = request("POST", "/slow");
  res = Response{};
  EXPECT_FALSE(router.handle_inline(slow, res));
  router.handle(slow, res);
  EXPECT_EQ(res.body, "s");
}

TEST(Router, JsonRoutesRefuseOtherMediaTypes) {
  Router router;
  router.add("POST", "/j", [](const Request&, Response& res) { res.body = "ok"; }, {.json_body = true});
  for (const char* type : {"text/plain", "text/plain; charset=utf-8", "multipart/form-data; boundary=x"}) {
    Request r = request("POST", "/j");
    r.headers.add("Content-Type", type);
    Response res;
    ASSERT_TRUE(router.handle_inline(r, res)) << type;
    EXPECT_EQ(res.status, 415) << type;
  }
  for (const char* type : {"application/json", "Application/JSON; charset=utf-8", "application/x-www-form-urlencoded"}) {
    Request r = request("POST", "/j");
    r.headers.add("Content-Type", type);
    Response res;
    EXPECT_FALSE(router.handle_inline(r, res)) << type;
  }
  Request none = request("POST", "/j");
  Response res;
  EXPECT_FALSE(router.handle_inline(none, res));
}

TEST(Router, AdmissionAuthenticatesAndFinisherSeesEveryResponse) {
  Router router;
  int finished = 0;
  router.add("GET", "/x", [](const Request&, Response& res) { res.body = "x"; }, {.run = Run::io_thread});
  router.set_admission({.authenticate = [](Request& req, Response& res) {
    if (req.header("Authorization").empty()) {
      res.status = 401;
      return true;
    }
    req.principal = "key1";
    return false;
  }});
  router.set_finisher([&](const Request&, Response& res) {
    ++finished;
    res.headers.set("X-Seen", "1");
  });
  Request anon = request("GET", "/x");
  Response res;
  ASSERT_TRUE(router.handle_inline(anon, res));
  EXPECT_EQ(res.status, 401);
  Request authed = request("GET", "/x");
  authed.headers.add("Authorization", "Bearer k");
  res = Response{};
  ASSERT_TRUE(router.handle_inline(authed, res));
  EXPECT_EQ(res.body, "x");
  EXPECT_EQ(authed.principal, "key1");
  EXPECT_EQ(res.headers.get("x-seen"), "1");
  EXPECT_EQ(finished, 2);
}

TEST(Router, AdmissionRunsInOrderAndOnlyOpenRoutesSkipAuthentication) {
  Router router;
  std::string trace;
  int handled = 0;
  router.add("GET", "/open", [&](const Request&, Response&) { ++handled; }, {.run = Run::io_thread, .auth = Auth::open});
  router.add("POST", "/json", [&](const Request& req, Response&) { ++handled, trace += "handler(" + req.body + ")"; },
             {.json_body = true});
  router.add("GET", "/plain", [&](const Request&, Response&) { ++handled, trace += "handler"; });
  router.set_admission({.screen = [&](Request&, Response&) { return trace += "screen ", false; },
                        .authenticate = [&](Request&, Response&) { return trace += "auth ", false; },
                        .body = [&](Request& req, Response& res) {
                          trace += "body ";
                          if (req.body != "ok") return res.status = 400, true;
                          return false;
                        }});
  Response res;
  Request open = request("GET", "/open");
  ASSERT_TRUE(router.handle_inline(open, res));
  EXPECT_EQ(trace, "screen ");
  trace.clear();
  Request missing = request("GET", "/missing");
  ASSERT_TRUE(router.handle_inline(missing, res));
  EXPECT_EQ(trace, "screen auth ");  // unknown paths authenticate before their 404
  trace.clear();
  Request good = request("POST", "/json");
  good.body = "ok";
  ASSERT_FALSE(router.handle_inline(good, res));
  router.handle(good, res);
  EXPECT_EQ(trace, "screen auth body handler(ok)");
  trace.clear();
  Request bad = request("POST", "/json");
  bad.body = "bad";
  res = Response{};
  ASSERT_FALSE(router.handle_inline(bad, res));
  router.handle(bad, res);
  EXPECT_EQ(trace, "screen auth body ");  // the body check answered; the handler never ran
  EXPECT_EQ(res.status, 400);
  trace.clear();
  Request plain = request("GET", "/plain");
  ASSERT_FALSE(router.handle_inline(plain, res));
  router.handle(plain, res);
  EXPECT_EQ(trace, "screen auth handler");  // no body check without json_body
  EXPECT_EQ(handled, 3);
  ASSERT_EQ(router.routes().size(), 3u);
  EXPECT_EQ(router.routes()[0].path, "/json");
  EXPECT_EQ(router.routes()[1].options.auth, Auth::open);
}

}  // namespace
}  // namespace kvasir::http
