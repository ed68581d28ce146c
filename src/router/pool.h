// The instances behind a router: their roles, their health (polled, and marked down at once when a
// request to them fails), the models they serve, and how many requests each is running. Placement
// picks by model, then by prefix affinity (so a conversation's next turn lands where its KV is
// cached), unless that instance is busier than the least busy one by more than a slack.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kvasir::router {

enum class Role { prefill, decode, both };
const char* role_name(Role r);

struct InstanceSpec {
  std::string url;  // http://host:port
  Role role = Role::both;
};

struct InstanceView {  // a snapshot, for /metrics and tests
  std::string url;
  Role role;
  bool healthy;
  int64_t in_flight, requests, failures;
  std::vector<std::string> models;
};

struct PoolOptions {
  std::chrono::milliseconds health_interval{1000};
  std::chrono::milliseconds health_timeout{1000};
  std::string api_key;  // sent to the instances' /v1/models
  int64_t affinity_slack = 2;  // the affine instance is kept unless it runs this many more requests
};

class Pool {
 public:
  Pool(std::vector<InstanceSpec> instances, PoolOptions options);
  ~Pool();  // stops the health checks
  void start();  // first check synchronously, then the polling thread

  // The instance for a request: serving `model` (any model when empty), decode-capable (decode or
  // both) or prefill, healthy, not in `exclude`. Affinity by `key`. -1: none.
  int pick(const std::string& model, bool prefill, uint64_t key, const std::set<int>& exclude) const;
  const std::string& url(int i) const { return instances_[size_t(i)]->spec.url; }
  Role role(int i) const { return instances_[size_t(i)]->spec.role; }
  bool any_prefill() const;
  // Running-request accounting and passive health: a failed request marks its instance down until
  // the next good health check.
  void begin(int i);
  void end(int i, bool failed);
  // Models any healthy decode-capable instance serves.
  std::vector<std::string> models() const;
  // Whether some instance serves `model` at all (healthy or not).
  bool known_model(const std::string& model) const;
  bool ready() const;  // a healthy decode-capable instance exists
  std::vector<InstanceView> view() const;
  void check_now();  // one round of health checks (tests; start() runs them periodically)

 private:
  struct Instance {
    InstanceSpec spec;
    std::atomic<bool> healthy{false};
    std::atomic<int64_t> in_flight{0}, requests{0}, failures{0};
    std::vector<std::string> models;  // under mutex_
  };
  void check(Instance& inst);
  void loop();

  std::vector<std::unique_ptr<Instance>> instances_;
  PoolOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// FNV-1a of a request's leading prompt text: the affinity key.
uint64_t affinity_key(std::string_view prefix);

}  // namespace kvasir::router
