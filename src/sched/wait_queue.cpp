#include "sched/wait_queue.h"

#include <algorithm>
#include <limits>

namespace kvasir::sched {
namespace {

// Idle tenants at or below the floor are forgotten beyond this many (a lifted counter would bring
// them back to the same place); heavier ones are kept so that going idle resets nothing.
constexpr size_t kMaxIdleTenants = 4096;

}  // namespace

WaitQueue::Tenant& WaitQueue::tenant(const std::string& name) {
  auto [it, fresh] = tenants_.try_emplace(name);
  if (fresh) it->second.counter = floor_;
  return it->second;
}

void WaitQueue::lift(Tenant& t) const {
  double low = std::numeric_limits<double>::infinity();
  for (const auto& [name, other] : tenants_)
    if (other.waiting > 0) low = std::min(low, other.counter);
  t.counter = std::max(t.counter, low == std::numeric_limits<double>::infinity() ? floor_ : low);
}

void WaitQueue::push(Request* r) {
  Tenant& t = tenant(r->options.tenant);
  if (t.waiting == 0) lift(t);
  ++t.waiting;
  levels_[level_of(*r)][r->options.tenant].emplace(r->arrival_seq, r);
  ++size_;
}

bool WaitQueue::goes_before(const Request* a, const Request* b) const {
  const double ca = tenants_.at(a->options.tenant).counter, cb = tenants_.at(b->options.tenant).counter;
  return ca != cb ? ca < cb : a->arrival_seq < b->arrival_seq;
}

Request* WaitQueue::front() const {
  if (levels_.empty()) return nullptr;
  Request* best = nullptr;
  for (const auto& [name, queue] : levels_.begin()->second)
    if (!best || goes_before(queue.begin()->second, best)) best = queue.begin()->second;
  return best;
}

std::vector<Request*> WaitQueue::heads() const {
  std::vector<Request*> out;
  if (levels_.empty()) return out;
  for (const auto& [name, queue] : levels_.begin()->second) out.push_back(queue.begin()->second);
  std::sort(out.begin(), out.end(), [this](const Request* a, const Request* b) { return goes_before(a, b); });
  return out;
}

void WaitQueue::admitted(const Request* r) {
  floor_ = std::max(floor_, counter(r->options.tenant));
  erase(r);
}

void WaitQueue::erase(const Request* r) {
  auto level = levels_.find(level_of(*r));
  if (level == levels_.end()) return;
  auto queue = level->second.find(r->options.tenant);
  if (queue == level->second.end() || queue->second.erase(r->arrival_seq) == 0) return;
  if (queue->second.empty()) level->second.erase(queue);
  if (level->second.empty()) levels_.erase(level);
  --tenants_.at(r->options.tenant).waiting;
  --size_;
  if (tenants_.size() > kMaxIdleTenants) prune();
}

void WaitQueue::charge(const std::string& name, double weight, int64_t prompt_rows, int64_t decode_rows) {
  const double service = kPromptRowCost * double(prompt_rows) + kDecodeRowCost * double(decode_rows);
  tenant(name).counter += service / std::max(weight, 1e-6);
}

double WaitQueue::counter(std::string_view name) const {
  auto it = tenants_.find(std::string(name));
  return it == tenants_.end() ? floor_ : it->second.counter;
}

void WaitQueue::prune() {
  std::erase_if(tenants_, [&](const auto& e) { return e.second.waiting == 0 && e.second.counter <= floor_; });
}

}  // namespace kvasir::sched
