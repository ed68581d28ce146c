#include "router/pool.h"

#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kvasir::router {

const char* role_name(Role r) {
  switch (r) {
    case Role::prefill: return "prefill";
    case Role::decode: return "decode";
    case Role::both: return "both";
  }
  return "?";
}

uint64_t affinity_key(std::string_view prefix) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : prefix) h = (h ^ c) * 1099511628211ull;
  return h;
}

namespace {

// Rendezvous hashing: each (key, instance) pair gets a score; the best instance for a key stays
// the best when others come or go.
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

}  // namespace

Pool::Pool(std::vector<InstanceSpec> instances, PoolOptions options) : options_(std::move(options)) {
  for (auto& s : instances) {
    instances_.push_back(std::make_unique<Instance>());
    instances_.back()->spec = std::move(s);
  }
}

Pool::~Pool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Pool::start() {
  check_now();
  thread_ = std::thread([this] { loop(); });
}

void Pool::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, options_.health_interval, [this] { return stopping_; })) {
    lock.unlock();
    check_now();
    lock.lock();
  }
}

void Pool::check_now() {
  for (auto& inst : instances_) check(*inst);
}

void Pool::check(Instance& inst) {
  httplib::Client client(inst.spec.url);
  client.set_connection_timeout(options_.health_timeout);
  client.set_read_timeout(options_.health_timeout);
  client.set_write_timeout(options_.health_timeout);
  auto health = client.Get("/health");
  const bool ok = health && health->status == 200;
  if (ok) {
    const auto h = nlohmann::json::parse(health->body, nullptr, false);
    std::string pool;
    if (h.is_object() && h.contains("kv_pool") && h["kv_pool"].is_string()) pool = h["kv_pool"].get<std::string>();
    std::lock_guard<std::mutex> lock(mutex_);
    inst.kv_pool = std::move(pool);
  }
  if (ok && inst.spec.role != Role::prefill) {
    httplib::Headers headers;
    if (!options_.api_key.empty()) headers.emplace("Authorization", "Bearer " + options_.api_key);
    auto models = client.Get("/v1/models", headers);
    std::vector<std::string> names;
    if (models && models->status == 200) {
      auto j = nlohmann::json::parse(models->body, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array())
        for (const auto& m : j["data"])
          if (m.is_object() && m.contains("id") && m["id"].is_string()) names.push_back(m["id"].get<std::string>());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!names.empty()) inst.models = std::move(names);
  }
  inst.healthy = ok;
}

int Pool::pick(const std::string& model, bool prefill, uint64_t key, const std::set<int>& exclude) const {
  std::lock_guard<std::mutex> lock(mutex_);
  int best = -1, least = -1;
  uint64_t best_score = 0;
  for (int i = 0; i < int(instances_.size()); ++i) {
    const Instance& inst = *instances_[size_t(i)];
    if (exclude.count(i) || !inst.healthy) continue;
    if (prefill != (inst.spec.role == Role::prefill)) continue;
    if (!prefill && !model.empty() && std::find(inst.models.begin(), inst.models.end(), model) == inst.models.end())
      continue;
    const uint64_t score = mix(key, affinity_key(inst.spec.url));
    if (best < 0 || score > best_score) best = i, best_score = score;
    if (least < 0 || inst.in_flight < instances_[size_t(least)]->in_flight) least = i;
  }
  if (best < 0) return -1;
  if (key == 0) return least;
  const Instance& home = *instances_[size_t(best)];
  const Instance& idle = *instances_[size_t(least)];
  const bool pooled = !home.kv_pool.empty() && home.kv_pool == idle.kv_pool;
  const int64_t slack = pooled ? options_.pooled_affinity_slack : options_.affinity_slack;
  if (home.in_flight <= idle.in_flight + slack) {
    ++placements_.affine;
    return best;
  }
  ++(pooled ? placements_.balanced_pooled : placements_.balanced);
  return least;
}

PlacementCounts Pool::placements() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return placements_;
}

bool Pool::any_prefill() const {
  for (const auto& inst : instances_)
    if (inst->spec.role == Role::prefill) return true;
  return false;
}

void Pool::begin(int i) {
  ++instances_[size_t(i)]->in_flight;
  ++instances_[size_t(i)]->requests;
}

void Pool::end(int i, bool failed) {
  Instance& inst = *instances_[size_t(i)];
  --inst.in_flight;
  if (failed) {
    ++inst.failures;
    inst.healthy = false;  // until the next health check finds it well
  }
}

std::vector<std::string> Pool::models() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto& inst : instances_)
    if (inst->healthy && inst->spec.role != Role::prefill)
      for (const auto& m : inst->models)
        if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  return out;
}

bool Pool::known_model(const std::string& model) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& inst : instances_)
    if (std::find(inst->models.begin(), inst->models.end(), model) != inst->models.end()) return true;
  return false;
}

bool Pool::ready() const {
  for (const auto& inst : instances_)
    if (inst->healthy && inst->spec.role != Role::prefill) return true;
  return false;
}

std::vector<InstanceView> Pool::view() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<InstanceView> out;
  for (const auto& inst : instances_)
    out.push_back({inst->spec.url, inst->spec.role, inst->healthy.load(), inst->in_flight.load(), inst->requests.load(),
                   inst->failures.load(), inst->models, inst->kv_pool});
  return out;
}

}  // namespace kvasir::router
