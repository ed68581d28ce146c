// Router placement against fake instances (cpp-httplib servers answering /health and /v1/models):
// by model, by prefix affinity unless the affine instance is busier than the slack allows, never
// on an unhealthy instance, and a failed request takes its instance out until a health check;
// instances that report one shared KV pool trade requests at the smaller slack.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <memory>
#include <thread>

#include "router/pool.h"

namespace kvasir::router {
namespace {

class FakeInstance {
 public:
  FakeInstance(std::string model, int health = 200, std::string kv_pool = {})
      : model_(std::move(model)), kv_pool_(std::move(kv_pool)), health_(health) {
    server_.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
      r.status = health_;
      r.set_content(kv_pool_.empty() ? R"({"status":"ok"})" : R"({"status":"ok","kv_pool":")" + kv_pool_ + R"("})",
                    "application/json");
    });
    server_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(R"({"object":"list","data":[{"id":")" + model_ + R"("}]})", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeInstance() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  void set_health(int h) { health_ = h; }

 private:
  std::string model_, kv_pool_;
  std::atomic<int> health_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(RouterPool, PlacesByModelAffinityAndLoad) {
  FakeInstance a1("alpha"), a2("alpha"), b("beta");
  Pool pool({{a1.url(), Role::both}, {a2.url(), Role::both}, {b.url(), Role::both}}, {.affinity_slack = 2});
  pool.check_now();
  ASSERT_TRUE(pool.ready());
  EXPECT_EQ(pool.pick("beta", false, 42, {}), 2);
  EXPECT_EQ(pool.pick("gamma", false, 42, {}), -1);
  EXPECT_TRUE(pool.known_model("alpha"));
  EXPECT_FALSE(pool.known_model("gamma"));
  // Affinity: a key keeps its instance; different keys spread over both.
  int seen[2] = {0, 0};
  for (uint64_t k = 1; k <= 64; ++k) {
    const int i = pool.pick("alpha", false, affinity_key(std::to_string(k)), {});
    ASSERT_TRUE(i == 0 || i == 1);
    EXPECT_EQ(pool.pick("alpha", false, affinity_key(std::to_string(k)), {}), i);
    ++seen[i];
  }
  EXPECT_GT(seen[0], 8);
  EXPECT_GT(seen[1], 8);
  // Load: the affine instance keeps the key up to the slack, then the other takes it.
  const uint64_t key = affinity_key("conversation");
  const int home = pool.pick("alpha", false, key, {});
  const int other = 1 - home;
  for (int n = 0; n < 2; ++n) pool.begin(home);
  EXPECT_EQ(pool.pick("alpha", false, key, {}), home);
  pool.begin(home);
  EXPECT_EQ(pool.pick("alpha", false, key, {}), other);
  for (int n = 0; n < 3; ++n) pool.end(home, false);
  EXPECT_EQ(pool.pick("alpha", false, key, {}), home);
  // Excluded (already tried) instances are skipped.
  EXPECT_EQ(pool.pick("alpha", false, key, {home}), other);
}

// With a shared KV pool the affine instance yields at the pooled slack (0 here): one request more
// than the other sends the key over; instances of different pools (or none) keep the plain slack.
TEST(RouterPool, InstancesSharingAKvPoolTradeRequestsSooner) {
  auto place = [](const std::string& pool_a, const std::string& pool_b) {
    FakeInstance a("m", 200, pool_a), b("m", 200, pool_b);
    Pool pool({{a.url(), Role::both}, {b.url(), Role::both}}, {.affinity_slack = 2, .pooled_affinity_slack = 0});
    pool.check_now();
    EXPECT_EQ(pool.view()[0].kv_pool, pool_a);
    const uint64_t key = affinity_key("conversation");
    const int home = pool.pick("m", false, key, {});
    pool.begin(home);
    const int next = pool.pick("m", false, key, {});
    const PlacementCounts c = pool.placements();
    EXPECT_EQ(c.affine + c.balanced + c.balanced_pooled, 2);
    return std::pair{next != home, c};
  };
  auto [moved, counts] = place("pool-1/m", "pool-1/m");
  EXPECT_TRUE(moved);
  EXPECT_EQ(counts.balanced_pooled, 1);
  EXPECT_FALSE(place("pool-1/m", "pool-2/m").first);
  EXPECT_FALSE(place("", "").first);
  EXPECT_FALSE(place("pool-1/m", "").first);
}

TEST(RouterPool, UnhealthyInstancesAreNotPicked) {
  FakeInstance up("m"), down("m", 503);
  Pool pool({{up.url(), Role::both}, {down.url(), Role::both}}, {});
  pool.check_now();
  for (uint64_t k = 1; k <= 16; ++k) EXPECT_EQ(pool.pick("m", false, k, {}), 0);
  // A failed request marks its instance down at once, until a health check finds it well.
  pool.begin(0);
  pool.end(0, true);
  EXPECT_EQ(pool.pick("m", false, 1, {}), -1);
  EXPECT_FALSE(pool.ready());
  down.set_health(200);
  pool.check_now();
  EXPECT_TRUE(pool.ready());
  EXPECT_NE(pool.pick("m", false, 1, {}), -1);
  const auto v = pool.view();
  EXPECT_EQ(v[0].failures, 1);
  EXPECT_EQ(v[0].requests, 1);
}

TEST(RouterPool, PrefillInstancesAreKeptApart) {
  FakeInstance p("m"), d("m");
  Pool pool({{p.url(), Role::prefill}, {d.url(), Role::decode}}, {});
  pool.check_now();
  EXPECT_TRUE(pool.any_prefill());
  EXPECT_EQ(pool.pick("m", false, 7, {}), 1);  // generation goes to the decode instance
  EXPECT_EQ(pool.pick("", true, 7, {}), 0);    // the prefill instance is named for it
  EXPECT_EQ(pool.models(), std::vector<std::string>{"m"});
}

TEST(RouterPool, AnInstanceThatIsNotThereIsUnhealthy) {
  Pool pool({{"http://127.0.0.1:1", Role::both}}, {.health_timeout = std::chrono::milliseconds(300)});
  pool.check_now();
  EXPECT_FALSE(pool.ready());
  EXPECT_EQ(pool.pick("", false, 0, {}), -1);
}

}  // namespace
}  // namespace kvasir::router
