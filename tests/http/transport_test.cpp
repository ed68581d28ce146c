// The transport over real loopback sockets: idle and half-sent connections do not hold anyone
// else up, every phase has its timeout and limit, a client's hang-up reaches the handler, streams
// are chunked, and stop() ends everything, streams included.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/router.h"
#include "http/transport.h"

namespace kvasir::http {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += size_t(n);
  }
}

// Reads until the peer closes, `done(data)` holds, or the timeout passes.
template <typename Done>
std::string read_until(int fd, std::chrono::milliseconds timeout, Done done, bool* closed = nullptr) {
  std::string data;
  const auto deadline = Clock::now() + timeout;
  if (closed) *closed = false;
  while (!done(data)) {
    const int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, left) <= 0) break;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    data.append(buf, size_t(n));
  }
  return data;
}

// A whole response: headers plus Content-Length bytes, or a chunked body up to its last chunk.
bool whole_response(const std::string& d) {
  const size_t end = d.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  if (d.find("Transfer-Encoding: chunked") != std::string::npos) return d.find("\r\n0\r\n\r\n", end) != std::string::npos;
  const size_t cl = d.find("Content-Length: ");
  if (cl == std::string::npos || cl > end) return true;
  return d.size() >= end + 4 + std::stoul(d.substr(cl + 16));
}

std::string roundtrip(int port, const std::string& raw, std::chrono::milliseconds timeout = 5000ms) {
  int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, raw);
  std::string r = read_until(fd, timeout, whole_response);
  ::close(fd);
  return r;
}

std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: t\r\n\r\n"; }

// A small service: /fast answers on the I/O thread; /wait blocks until its client hangs up (or
// 5 s); /stream writes `chunks` pieces; /block waits for release().
struct TestService {
  Router router;
  std::atomic<bool> saw_gone{false};
  std::atomic<int> closes{0}, completed_closes{0};
  std::atomic<int> chunks{5};
  std::mutex m;
  std::condition_variable cv;
  bool released = false;

  TestService() {
    router.add("GET", "/fast", [](const Request&, Response& res) { res.body = "fast"; }, {.run = Run::io_thread});
    router.add("POST", "/wait", [this](const Request& req, Response& res) {
      const auto deadline = Clock::now() + 5s;
      while (!req.client_gone() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
      saw_gone = req.client_gone();
      res.body = "waited";
    });
    router.add("GET", "/stream", [this](const Request&, Response& res) {
      auto left = std::make_shared<int>(chunks.load());
      res.content_type = "text/event-stream";
      res.stream = [left](StreamSink& sink) {
        if (*left == 0) return false;
        std::this_thread::sleep_for(10ms);
        if (!sink.write("data: " + std::to_string(*left) + "\n\n")) return false;
        return --*left > 0;
      };
      res.on_close = [this](bool completed) {
        completed_closes += completed ? 1 : 0;
        ++closes;
      };
    });
    router.add("GET", "/block", [this](const Request&, Response& res) {
      std::unique_lock<std::mutex> lock(m);
      cv.wait_for(lock, 10s, [&] { return released; });
      res.body = "unblocked";
    });
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(m);
      released = true;
    }
    cv.notify_all();
  }
};

struct Fixture {
  explicit Fixture(TransportOptions o = {}) : transport(o, service.router) {
    EXPECT_TRUE(transport.bind("127.0.0.1", 0).ok());
    transport.start();
    port = transport.port();
  }
  TestService service;
  Transport transport;
  int port = 0;
};

template <typename Pred>
bool wait_for(Pred p, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!p()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

TEST(Transport, ServesKeepAliveAndPipelinedRequests) {
  Fixture f;
  int fd = connect_to(f.port);
  send_all(fd, get("/fast") + get("/fast"));
  std::string two = read_until(fd, 3000ms, [](const std::string& d) {
    size_t n = 0;
    for (size_t at = 0; (at = d.find("fast", at)) != std::string::npos; ++at) ++n;
    return n >= 2;
  });
  size_t statuses = 0;
  for (size_t at = 0; (at = two.find("HTTP/1.1 200 OK", at)) != std::string::npos; ++at) ++statuses;
  EXPECT_EQ(statuses, 2u) << two;  // two answers on one connection
  send_all(fd, "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  bool closed = false;
  std::string third = read_until(fd, 3000ms, [](const std::string&) { return false; }, &closed);
  EXPECT_NE(third.find("404"), std::string::npos);
  EXPECT_TRUE(closed);  // Connection: close is honoured
  ::close(fd);
}

TEST(Transport, ThousandIdleAndHalfSentConnectionsDoNotSlowOthers) {
  Fixture f;
  std::vector<int> idle;
  for (int i = 0; i < 1000; ++i) {
    int fd = connect_to(f.port);
    ASSERT_GE(fd, 0) << i;
    if (i % 2) send_all(fd, "POST /wait HTTP/1.1\r\nHost: t\r\nContent-Le");  // stuck mid-header
    idle.push_back(fd);
  }
  ASSERT_TRUE(wait_for([&] { return f.transport.stats().connections_open >= 1000; }, 5000ms));
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = Clock::now();
    EXPECT_NE(roundtrip(f.port, get(i % 2 ? "/fast" : "/stream")).find("200 OK"), std::string::npos);
    ms.push_back(ms_since(t0));
  }
  std::sort(ms.begin(), ms.end());
  // A stream takes ~50 ms of its own (5 pieces 10 ms apart); the bound is far below what one
  // thread per connection would cost (requests queue behind the idle ones for seconds).
  EXPECT_LT(ms[ms.size() / 2], 250.0);
  EXPECT_LT(ms.back(), 1000.0);
  for (int fd : idle) ::close(fd);
  EXPECT_TRUE(wait_for([&] { return f.transport.stats().connections_open == 0; }, 5000ms));
}

TEST(Transport, SlowHeadersAndSlowBodiesAreCutOff) {
  TransportOptions o;
  o.header_timeout = 300ms;
  o.body_timeout = 300ms;
  Fixture f(o);
  int slow_header = connect_to(f.port);
  send_all(slow_header, "GET /fast HTTP/1.1\r\nHo");
  int slow_body = connect_to(f.port);
  send_all(slow_body, "POST /wait HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc");
  const auto t0 = Clock::now();
  bool closed_h = false, closed_b = false;
  read_until(slow_header, 3000ms, [](const std::string&) { return false; }, &closed_h);
  read_until(slow_body, 3000ms, [](const std::string&) { return false; }, &closed_b);
  EXPECT_TRUE(closed_h);
  EXPECT_TRUE(closed_b);
  EXPECT_LT(ms_since(t0), 2000.0);
  ::close(slow_header);
  ::close(slow_body);
  EXPECT_NE(roundtrip(f.port, get("/fast")).find("fast"), std::string::npos);
}

TEST(Transport, AHandlerSeesItsClientHangUp) {
  Fixture f;
  int fd = connect_to(f.port);
  send_all(fd, "POST /wait HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
  std::this_thread::sleep_for(100ms);
  const auto t0 = Clock::now();
  ::close(fd);
  ASSERT_TRUE(wait_for([&] { return f.service.saw_gone.load(); }, 3000ms));
  EXPECT_LT(ms_since(t0), 1000.0);
  EXPECT_TRUE(wait_for([&] { return f.transport.stats().requests_in_flight == 0; }, 3000ms));
}

TEST(Transport, StreamsAreChunkedAndAHangUpEndsThem) {
  Fixture f;
  const std::string whole = roundtrip(f.port, get("/stream"));
  EXPECT_NE(whole.find("Transfer-Encoding: chunked"), std::string::npos) << whole;
  EXPECT_NE(whole.find("Content-Type: text/event-stream"), std::string::npos);
  for (int i = 5; i >= 1; --i) EXPECT_NE(whole.find("data: " + std::to_string(i)), std::string::npos) << whole;
  ASSERT_TRUE(wait_for([&] { return f.service.closes.load() == 1; }, 2000ms));
  EXPECT_EQ(f.service.completed_closes.load(), 1);

  f.service.chunks = 1000000;  // ~3 hours of pieces
  int fd = connect_to(f.port);
  send_all(fd, get("/stream"));
  read_until(fd, 2000ms, [](const std::string& d) { return d.find("data:") != std::string::npos; });
  ::close(fd);
  ASSERT_TRUE(wait_for([&] { return f.service.closes.load() == 2; }, 3000ms));
  EXPECT_EQ(f.service.completed_closes.load(), 1);  // the second one did not complete
}

TEST(Transport, StopEndsRunningStreamsAndWaitingHandlers) {
  auto f = std::make_unique<Fixture>();
  f->service.chunks = 1000000;
  int stream = connect_to(f->port);
  send_all(stream, get("/stream"));
  read_until(stream, 2000ms, [](const std::string& d) { return d.find("data:") != std::string::npos; });
  int waiting = connect_to(f->port);
  send_all(waiting, "POST /wait HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
  std::this_thread::sleep_for(100ms);
  const auto t0 = Clock::now();
  f->transport.stop(2000ms);
  EXPECT_LT(ms_since(t0), 1500.0);
  EXPECT_EQ(f->service.closes.load(), 1);
  EXPECT_EQ(f->service.completed_closes.load(), 0);
  EXPECT_TRUE(f->service.saw_gone.load());
  bool closed = false;
  read_until(stream, 2000ms, [](const std::string&) { return false; }, &closed);
  EXPECT_TRUE(closed);
  ::close(stream);
  ::close(waiting);
  EXPECT_LT(connect_to(f->port), 0);  // no longer listening
}

TEST(Transport, ConnectionsBeyondTheLimitAreClosedAtOnce) {
  TransportOptions o;
  o.max_connections = 4;
  Fixture f(o);
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(connect_to(f.port));
  ASSERT_TRUE(wait_for([&] { return f.transport.stats().connections_open == 4; }, 3000ms));
  int extra = connect_to(f.port);
  bool closed = false;
  read_until(extra, 2000ms, [](const std::string&) { return false; }, &closed);
  EXPECT_TRUE(closed);
  EXPECT_EQ(f.transport.stats().connections_refused, 1);
  ::close(extra);
  ::close(held[0]);
  ASSERT_TRUE(wait_for([&] { return f.transport.stats().connections_open == 3; }, 3000ms));
  EXPECT_NE(roundtrip(f.port, get("/fast")).find("fast"), std::string::npos);  // room again
  for (size_t i = 1; i < held.size(); ++i) ::close(held[i]);
}

TEST(Transport, RequestsBeyondWorkersAndQueueGet503) {
  TransportOptions o;
  o.workers = 1;
  o.max_queued = 1;
  Fixture f(o);
  int a = connect_to(f.port), b = connect_to(f.port);
  send_all(a, get("/block"));
  send_all(b, get("/block"));
  ASSERT_TRUE(wait_for([&] { return f.transport.stats().requests_in_flight == 2; }, 3000ms));
  const std::string refused = roundtrip(f.port, get("/block"));
  EXPECT_NE(refused.find("503"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos);
  EXPECT_NE(roundtrip(f.port, get("/fast")).find("fast"), std::string::npos);  // the I/O thread still answers
  f.service.release();
  EXPECT_NE(read_until(a, 3000ms, whole_response).find("unblocked"), std::string::npos);
  EXPECT_NE(read_until(b, 3000ms, whole_response).find("unblocked"), std::string::npos);
  ::close(a);
  ::close(b);
}

TEST(Transport, OversizedBodiesGetA413TheClientCanRead) {
  TransportOptions o;
  o.limits.max_body_bytes = 1024;
  Fixture f(o);
  const std::string body(64 << 10, 'x');
  const std::string r = roundtrip(f.port, "POST /wait HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                                              std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_NE(r.find("413"), std::string::npos) << r.substr(0, 200);
  const std::string chunked = roundtrip(f.port, "POST /wait HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                                                "800\r\n" + std::string(2048, 'y') + "\r\n0\r\n\r\n");
  EXPECT_NE(chunked.find("413"), std::string::npos) << chunked.substr(0, 200);
  const std::string big_header = roundtrip(f.port, "GET /fast HTTP/1.1\r\nX: " + std::string(64 << 10, 'h') + "\r\n\r\n");
  EXPECT_NE(big_header.find("431"), std::string::npos) << big_header.substr(0, 200);
  EXPECT_NE(roundtrip(f.port, "GARBAGE\r\n\r\n").find("400"), std::string::npos);
}

TEST(Transport, ExpectContinueIsAnswered) {
  Fixture f;
  int fd = connect_to(f.port);
  send_all(fd, "POST /wait HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
  const std::string interim = read_until(fd, 2000ms, [](const std::string& d) { return d.find("\r\n\r\n") != std::string::npos; });
  EXPECT_EQ(interim.rfind("HTTP/1.1 100 Continue", 0), 0u) << interim;
  ::close(fd);
}

}  // namespace
}  // namespace kvasir::http
