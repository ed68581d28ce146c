// The waiting requests, in the order the scheduler admits them: by service class (interactive
// first), then priority (lower first), then fair share between tenants, then arrival.
//
// Fair share is the virtual token counter (Sheng et al., "Fairness in Serving Large Language
// Models", OSDI'24): every tenant has a counter that grows by the service its requests receive
// (prompt rows at kPromptRowCost, decode rows at kDecodeRowCost), divided by its weight; of the
// tenants waiting at the head level, the one with the smallest counter goes next, its oldest
// request first. A tenant that starts waiting has its counter lifted to the smallest counter of
// the tenants already waiting (or, with nobody waiting, to the last admitted tenant's), so time
// spent idle banks no credit: two backlogged tenants' counters stay within one request's cost of
// each other, whatever their arrival rates. With one tenant (no tenants given) this is FCFS.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sched/request.h"

namespace kvasir::sched {

class WaitQueue {
 public:
  // A decode row costs more than a prompt row (the weights are read for one token instead of a
  // chunk's); the ratio is the paper's.
  static constexpr double kPromptRowCost = 1.0, kDecodeRowCost = 2.0;

  void push(Request* r);            // r->options say where; a preempted request keeps its arrival
  Request* front() const;           // the next to admit; nullptr when empty
  // The oldest request of each tenant at front()'s level, in admission order (front() first).
  std::vector<Request*> heads() const;
  void admitted(const Request* r);  // r leaves the queue to run (its counter becomes the floor)
  void erase(const Request* r);     // a waiting request that ends (abort)
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  // Service a request of `tenant` (weight > 0) received: prompt and decode rows computed.
  void charge(const std::string& tenant, double weight, int64_t prompt_rows, int64_t decode_rows);
  double counter(std::string_view tenant) const;  // the floor for a tenant not seen

  // Calls fn(const Request&) for every waiting request, in no particular order.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const auto& [level, tenants] : levels_)
      for (const auto& [tenant, queue] : tenants)
        for (const auto& [seq, r] : queue) fn(*r);
  }

 private:
  struct Level {
    ServiceClass service_class;
    int32_t priority;
    auto operator<=>(const Level&) const = default;
  };
  using TenantQueue = std::map<uint64_t, Request*>;  // by arrival
  struct Tenant {
    double counter = 0;
    int32_t waiting = 0;
  };
  static Level level_of(const Request& r) { return {r.options.service_class, r.options.priority}; }
  Tenant& tenant(const std::string& name);
  void lift(Tenant& t) const;
  // Between two tenants' oldest requests of one level: the smaller counter, then the older.
  bool goes_before(const Request* a, const Request* b) const;
  void prune();

  std::map<Level, std::map<std::string, TenantQueue, std::less<>>> levels_;
  std::unordered_map<std::string, Tenant> tenants_;
  double floor_ = 0;  // the counter of the tenant admitted last
  size_t size_ = 0;
};

}  // namespace kvasir::sched
