// Load-generator arithmetic: percentiles as numpy computes them, vLLM metric names, length specs,
// arrival gaps, SSE parsing, the knee of a throughput-latency curve, and well-formed SVG.
#include <gtest/gtest.h>

#include <mutex>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "loadgen/client.h"
#include "loadgen/runner.h"
#include "loadgen/stats.h"
#include "loadgen/svg.h"
#include "loadgen/workload.h"

namespace kvasir::loadgen {
namespace {

TEST(Stats, PercentilesInterpolateLikeNumpy) {
  const std::vector<double> v = {4, 1, 3, 2};  // sorted: 1 2 3 4
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(percentile({}, 50), 0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7);
}

TEST(Stats, RunMetricsWithVllmNames) {
  std::vector<RequestOutcome> outs(3);
  outs[0] = {.success = true, .start_s = 0, .ttft_s = 0.1, .latency_s = 1.0, .itl_s = {0.3, 0.3, 0.3},
             .input_tokens = 10, .output_tokens = 4};
  outs[1] = {.success = true, .start_s = 0.5, .ttft_s = 0.3, .latency_s = 0.3, .itl_s = {}, .input_tokens = 20,
             .output_tokens = 1};
  outs[2] = {.success = false, .error = "HTTP 400", .start_s = 0.2, .latency_s = 0.1};
  const std::vector<double> ps = {50, 99};
  const RunMetrics m = compute_metrics(outs, 2.0, ps);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 30);
  EXPECT_EQ(m.total_output, 5);
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(m.output_throughput, 2.5);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 17.5);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 200);
  EXPECT_DOUBLE_EQ(m.tpot_ms.mean, 300);  // (1.0 - 0.1) / 3; the one-token request has no TPOT
  EXPECT_DOUBLE_EQ(m.itl_ms.median, 300);
  EXPECT_DOUBLE_EQ(m.e2el_ms.mean, 650);
  EXPECT_EQ(m.max_concurrent, 2);  // 0..1.0 overlaps 0.2..0.3 and 0.5..0.8, which do not overlap
  const auto j = metrics_json(m);
  for (const char* key : {"duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                          "request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms",
                          "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                          "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
                          "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(percentile_name(99.9), "99.9");
}

TEST(Stats, GoodputCountsRequestsWithinTheSlo) {
  auto ok = [](double ttft, double latency, int64_t out) {
    return RequestOutcome{.success = true, .ttft_s = ttft, .latency_s = latency, .output_tokens = out, .http_status = 200};
  };
  std::vector<RequestOutcome> outs{
      ok(0.1, 1.1, 11),   // TTFT 100 ms, TPOT 100 ms: met
      ok(0.3, 0.4, 11),   // TTFT 300 ms: missed
      ok(0.1, 3.1, 11),   // TPOT 300 ms: missed
      ok(0.05, 0.05, 1),  // one token: no TPOT, met
  };
  RequestOutcome refused;
  refused.http_status = 429;
  refused.error = "HTTP 429: late";
  outs.push_back(refused);
  const std::vector<double> ps{50, 99};
  const RunMetrics m = compute_metrics(outs, 2.0, ps, SloSpec{.ttft_ms = 200, .tpot_ms = 200});
  EXPECT_EQ(m.slo_met, 2);
  EXPECT_EQ(m.refused, 1);
  EXPECT_EQ(m.failed, 1);
  EXPECT_DOUBLE_EQ(m.goodput, 1.0);
  // Without an SLO every success counts.
  EXPECT_EQ(compute_metrics(outs, 2.0, ps).slo_met, 4);
}

TEST(Workload, LengthSpecs) {
  auto fixed = LengthSpec::parse("128");
  ASSERT_TRUE(fixed.ok());
  std::mt19937_64 rng(1);
  EXPECT_EQ(fixed->sample(rng), 128);
  auto uni = LengthSpec::parse("10:20");
  ASSERT_TRUE(uni.ok());
  auto logu = LengthSpec::parse("log:16:1024");
  ASSERT_TRUE(logu.ok());
  std::vector<int> per_octave(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const int64_t u = uni->sample(rng);
    EXPECT_GE(u, 10);
    EXPECT_LE(u, 20);
    const int64_t l = logu->sample(rng);
    ASSERT_GE(l, 16);
    ASSERT_LE(l, 1024);
    ++per_octave[size_t(std::min<int64_t>(6, int64_t(std::log2(double(l))) - 4))];
  }
  for (int k = 0; k < 6; ++k) EXPECT_GT(per_octave[size_t(k)], 800) << k;  // about 1000 per octave
  for (const char* bad : {"", "0", "x", "5:2", "1:2:3", "log:0:4", "-3"}) EXPECT_FALSE(LengthSpec::parse(bad).ok()) << bad;
  EXPECT_EQ(logu->to_string(), "log:16:1024");
}

TEST(Workload, ExactLengthsFromAPool) {
  WorkloadOptions o;
  o.input_len = *LengthSpec::parse("5:9");
  o.output_len = *LengthSpec::parse("3");
  o.num_requests = 50;
  const std::vector<int32_t> pool = {11, 12, 13};
  auto reqs = build_workload(o, pool);
  ASSERT_TRUE(reqs.ok());
  ASSERT_EQ(reqs->size(), 50u);
  for (const auto& r : *reqs) {
    EXPECT_EQ(int64_t(r.prompt_ids.size()), r.input_len);
    EXPECT_GE(r.input_len, 5);
    EXPECT_LE(r.input_len, 9);
    EXPECT_EQ(r.output_len, 3);
    for (int32_t t : r.prompt_ids) EXPECT_TRUE(t >= 11 && t <= 13);
  }
  o.dataset = Dataset::shared_prefix;
  o.prefix_len = 16;
  o.num_prefixes = 2;
  auto shared = build_workload(o, pool);
  ASSERT_TRUE(shared.ok());
  const auto& a = (*shared)[0].prompt_ids;
  const auto& c = (*shared)[2].prompt_ids;
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 16, c.begin()));  // same group, same prefix
  EXPECT_EQ((*shared)[0].input_len, int64_t(a.size()));
}

TEST(Workload, JsonlTakesTextAndTokenIdPrompts) {
  const std::string path = testing::TempDir() + "/kvasir_workload.jsonl";
  {
    std::ofstream f(path);
    f << R"({"prompt": "hello there", "output_len": 7})" << "\n"
      << R"({"prompt": [5, 6, 7, 8], "output_len": 2})" << "\n";
  }
  WorkloadOptions o;
  o.dataset = Dataset::jsonl;
  o.prompt_file = path;
  o.num_requests = 2;
  o.output_len = *LengthSpec::parse("3");
  auto reqs = build_workload(o, {});
  ASSERT_TRUE(reqs.ok()) << reqs.error();
  ASSERT_EQ(reqs->size(), 2u);
  int text = 0, ids = 0;
  for (const auto& r : *reqs) {
    if (!r.prompt_text.empty()) {
      ++text;
      EXPECT_EQ(r.prompt_text, "hello there");
      EXPECT_EQ(r.output_len, 7);
    } else {
      ++ids;
      EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{5, 6, 7, 8}));
      EXPECT_EQ(r.input_len, 4);
      EXPECT_EQ(r.output_len, 2);
    }
  }
  EXPECT_EQ(text, 1);
  EXPECT_EQ(ids, 1);
  {
    std::ofstream f(path);
    f << R"({"prompt": [1, -2]})" << "\n";
  }
  auto bad = build_workload(o, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("token ids"), std::string::npos) << bad.error();
  std::remove(path.c_str());
}

TEST(Runner, ArrivalGapsKeepTheRate) {
  const auto gaps = arrival_gaps(20000, 4.0, 0.5, 7);
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / double(gaps.size());
  EXPECT_NEAR(mean, 0.25, 0.01);
  double var = 0;
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= double(gaps.size());
  // gamma(k, theta): variance k * theta^2 = mean^2 / k, so burstiness 0.5 doubles it over Poisson.
  EXPECT_NEAR(var, 0.25 * 0.25 / 0.5, 0.01);
  for (double g : arrival_gaps(5, INFINITY, 1.0, 1)) EXPECT_EQ(g, 0.0);
}

TEST(Client, SseParserSplitsAcrossReads) {
  SseParser p;
  std::vector<std::string> got;
  auto sink = [&](std::string_view d) { got.emplace_back(d); };
  const std::string stream = "data: {\"a\":1}\n\ndata: {\"b\":2}\r\n\r\n: comment\n\ndata: [DONE]\n\n";
  for (char ch : stream) p.feed(&ch, 1, sink);
  EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "[DONE]"}));
  auto u = split_url("http://127.0.0.1:8080/v1/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->first, "http://127.0.0.1:8080");
  EXPECT_EQ(u->second, "");
  EXPECT_FALSE(split_url("127.0.0.1:8080").ok());
}

TEST(Svg, KneeAndCharts) {
  // Throughput saturates at ~100 while P99 keeps climbing: the knee is where it flattens.
  const std::vector<CurvePoint> pts = {{"c=1", 20, 50}, {"c=2", 40, 52}, {"c=4", 75, 60},
                                       {"c=8", 95, 90},  {"c=16", 100, 200}, {"c=32", 101, 420}};
  EXPECT_EQ(find_knee(pts), 3);
  EXPECT_EQ(find_knee(std::vector<CurvePoint>(pts.begin(), pts.begin() + 2)), -1);
  const std::string curve = curve_svg("t", "x", "y", pts, 3);
  EXPECT_EQ(curve.rfind("<svg", 0), 0u);
  EXPECT_NE(curve.find("c=8 (knee)"), std::string::npos);
  EXPECT_EQ(curve.substr(curve.size() - 7), "</svg>\n");

  const std::vector<HeatSample> samples = {{100, 10, 5.0}, {120, 12, 7.0}, {100, 200, 1.0}, {3, 1, 2.0}};
  const std::string heat = heatmap_svg("TTFT <ms>", "ms", samples);
  EXPECT_NE(heat.find("TTFT &lt;ms&gt;"), std::string::npos);
  EXPECT_NE(heat.find(">65-128<"), std::string::npos);   // input bucket of 100 and 120
  EXPECT_NE(heat.find(">9-16<"), std::string::npos);     // output bucket of 10 and 12
  EXPECT_NE(heat.find(">6.00<"), std::string::npos);     // median of 5 and 7
  EXPECT_NE(heat.find(">n=2<"), std::string::npos);
  EXPECT_EQ(pow2_bucket(1), 1);
  EXPECT_EQ(pow2_bucket(5), 8);
}

}  // namespace
}  // namespace kvasir::loadgen

// Against a llama-server look-alike: it closes idle keep-alive connections after a second without
// telling the client, and its /tokenize takes {"content"} (answering {"prompt"} with no tokens).
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace kvasir::loadgen {
namespace {

class FakeLlamaServer {
 public:
  FakeLlamaServer() {
    server_.set_keep_alive_timeout(1);
    server_.Post("/tokenize", [](const httplib::Request& req, httplib::Response& res) {
      auto j = nlohmann::json::parse(req.body);
      nlohmann::json tokens = nlohmann::json::array();
      if (j.contains("content"))
        for (size_t i = 0; i < j["content"].get<std::string>().size(); ++i) tokens.push_back({{"id", i}, {"piece", "x"}});
      res.set_content(nlohmann::json{{"tokens", tokens}}.dump(), "application/json");
    });
    server_.Post("/v1/completions", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          "data: {\"choices\":[{\"text\":\"hi\"}]}\n\n"
          "data: {\"choices\":[],\"usage\":{\"completion_tokens\":1,\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n",
          "text/event-stream");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeLlamaServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(Client, TokenizesWithLlamaServersShape) {
  FakeLlamaServer s;
  Client c({.url = s.url()});
  auto ids = c.tokenize("abcd");
  ASSERT_TRUE(ids.ok()) << ids.error();
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 1, 2, 3}));
}

// A server that answers the first request of every connection (keep-alive) and closes the
// connection without a word when a second request arrives on it: what a client sees when the
// server timed the idle connection out just as the request went out.
class ClosingServer {
 public:
  ClosingServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 8);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~ClosingServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int connections() const { return connections_; }

 private:
  static bool read_request(int c) {
    std::string in;
    char buf[4096];
    size_t body_at = std::string::npos, need = 0;
    for (;;) {
      if (body_at != std::string::npos && in.size() >= body_at + need) return true;
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return false;
      in.append(buf, size_t(n));
      if (body_at == std::string::npos && (body_at = in.find("\r\n\r\n")) != std::string::npos) {
        body_at += 4;
        const size_t cl = in.find("Content-Length: ");
        need = cl == std::string::npos ? 0 : std::stoul(in.substr(cl + 16));
      }
    }
  }
  void serve() {
    for (;;) {
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      ++connections_;
      if (read_request(c)) {
        const std::string body =
            "data: {\"choices\":[{\"text\":\"hi\"}]}\n\n"
            "data: {\"choices\":[],\"usage\":{\"completion_tokens\":1,\"prompt_tokens\":3}}\n\ndata: [DONE]\n\n";
        const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
                                 "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
        const std::string all = head + body;
        (void)::send(c, all.data(), all.size(), MSG_NOSIGNAL);
        read_request(c);  // the next request on this connection: dropped unanswered
      }
      ::close(c);
    }
  }
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

TEST(Client, RetriesARequestOnAConnectionTheServerClosed) {
  ClosingServer s;
  Client c({.url = s.url()});
  RequestSpec spec{.prompt_text = "x", .output_len = 1};
  const auto t0 = std::chrono::steady_clock::now();
  const RequestOutcome warm = c.send(spec, "m", t0);
  ASSERT_TRUE(warm.success) << warm.error;
  const RequestOutcome next = c.send(spec, "m", t0);  // goes out on the kept connection, which dies
  EXPECT_TRUE(next.success) << next.error;
  EXPECT_EQ(next.text, "hi");
  EXPECT_EQ(s.connections(), 2);  // sent again, once, on a fresh connection
}

// Multi-turn conversations: each turn's prompt is the one before, an answer and a new message;
// a closed-loop client sends a conversation's turns in order (the server sees each conversation's
// prompts grow), while conversations run side by side.
TEST(Workload, ConversationsGrowTurnByTurnAndAreSentInOrder) {
  WorkloadOptions o{.dataset = Dataset::conversations, .input_len = *LengthSpec::parse("5"),
                    .output_len = *LengthSpec::parse("3"), .prefix_len = 8, .num_requests = 12, .turns = 4};
  std::vector<int32_t> pool;
  for (int i = 0; i < 50; ++i) pool.push_back(100 + i);
  auto reqs = build_workload(o, pool);
  ASSERT_TRUE(reqs.ok()) << reqs.error();
  ASSERT_EQ(reqs->size(), 12u);
  for (size_t i = 0; i < reqs->size(); ++i) {
    const RequestSpec& r = (*reqs)[i];
    EXPECT_EQ(r.conversation, int64_t(i / 4));
    EXPECT_EQ(r.input_len, int64_t(8 + (i % 4) * (5 + 3) + 5));
    if (i % 4) {
      const auto& before = (*reqs)[i - 1].prompt_ids;
      EXPECT_TRUE(std::equal(before.begin(), before.end(), r.prompt_ids.begin())) << i;
    }
  }
  EXPECT_FALSE(build_workload(o, {}).ok());  // token ids are needed

  std::mutex mu;
  std::vector<std::vector<int32_t>> seen;
  httplib::Server server;
  server.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body);
    {
      std::lock_guard lock(mu);
      seen.push_back(j["prompt"].get<std::vector<int32_t>>());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    res.set_content("data: {\"choices\":[{\"text\":\"hi\"}]}\n\ndata: [DONE]\n\n", "text/event-stream");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread t([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const RunResult r = run_load({.url = "http://127.0.0.1:" + std::to_string(port)}, "m", *reqs,
                               {.mode = LoadPoint::Mode::closed, .concurrency = 3});
  server.stop();
  t.join();
  ASSERT_EQ(seen.size(), 12u);
  for (int64_t c = 0; c < 3; ++c) {  // in arrival order, each conversation's prompts are its turns in order
    size_t turn = 0;
    for (const auto& p : seen)
      if (p.size() >= 8 && std::equal(p.begin(), p.begin() + 8, (*reqs)[size_t(c * 4)].prompt_ids.begin()))
        EXPECT_EQ(p, (*reqs)[size_t(c * 4) + turn++].prompt_ids);
    EXPECT_EQ(turn, 4u);
  }
}

}  // namespace
}  // namespace kvasir::loadgen

