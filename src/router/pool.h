// The instances behind a router: their roles, their health (polled, and marked down at once when a
// request to them fails), the models they serve, and how many requests each is running. Placement
// picks by model, then by prefix affinity (so a conversation's next turn lands where its KV is
// cached), unless that instance is busier than the least busy one by more than a slack. Instances
// that report the same shared KV pool in /health (serve --kv-store) can read each other's prefixes
// back for a small fraction of a prefill, so between them a smaller slack holds: load wins sooner.
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
  std::string kv_pool;  // the shared KV pool it reported; empty: none
};

struct PoolOptions {
  std::chrono::milliseconds health_interval{1000};
  std::chrono::milliseconds health_timeout{1000};
  std::string api_key;  // sent to the instances' /v1/models
  int64_t affinity_slack = 2;  // the affine instance is kept unless it runs this many more requests
  int64_t pooled_affinity_slack = 1;  // the same, when the less busy instance shares its KV pool (bench/kv_pool_bench.py)
};

// Why requests went where they did (for /metrics): kept on the affine instance, or moved to a less
// busy one that shares its KV pool or that does not.
struct PlacementCounts {
  int64_t affine = 0, balanced_pooled = 0, balanced = 0;
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
  PlacementCounts placements() const;
  void check_now();  // one round of health checks (tests; start() runs them periodically)

 private:
  struct Instance {
    InstanceSpec spec;
    std::atomic<bool> healthy{false};
    std::atomic<int64_t> in_flight{0}, requests{0}, failures{0};
    std::vector<std::string> models;  // under mutex_
    std::string kv_pool;               // under mutex_
  };
  void check(Instance& inst);
  void loop();

  std::vector<std::unique_ptr<Instance>> instances_;
  PoolOptions options_;
  mutable std::mutex mutex_;
  mutable PlacementCounts placements_;  // under mutex_
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

// FNV-1a of a request's leading prompt text: the affinity key.
uint64_t affinity_key(std::string_view prefix);

}  // namespace kvasir::router
