#include "loadgen/runner.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

namespace kvasir::loadgen {

namespace {

using SteadyClock = std::chrono::steady_clock;

// Bounds the requests in flight in open-loop mode.
class Slots {
 public:
  explicit Slots(int64_t n) : free_(n) {}
  void acquire() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void release() {
    {
      std::lock_guard lock(mutex_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int64_t free_;
};

void run_closed(const ClientOptions& co, const std::string& model, const std::vector<RequestSpec>& requests,
                const LoadPoint& load, RunResult& out, SteadyClock::time_point t0) {
  // Units of work: a conversation's turns together (sent in order by one client), else one request.
  std::vector<size_t> unit_start;
  for (size_t i = 0; i < requests.size(); ++i)
    if (i == 0 || requests[i].conversation < 0 || requests[i].conversation != requests[i - 1].conversation)
      unit_start.push_back(i);
  unit_start.push_back(requests.size());
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  const int64_t n = std::max<int64_t>(1, std::min<int64_t>(load.concurrency, int64_t(unit_start.size() - 1)));
  for (int64_t w = 0; w < n; ++w) {
    workers.emplace_back([&] {
      Client client(co);
      for (size_t u; (u = next.fetch_add(1)) + 1 < unit_start.size();)
        for (size_t i = unit_start[u]; i < unit_start[u + 1]; ++i) out.outcomes[i] = client.send(requests[i], model, t0);
    });
  }
  for (auto& t : workers) t.join();
}

void run_open(const ClientOptions& co, const std::string& model, const std::vector<RequestSpec>& requests,
              const LoadPoint& load, RunResult& out, SteadyClock::time_point t0) {
  const auto gaps = arrival_gaps(int64_t(requests.size()), load.rate, load.burstiness, load.seed);
  Slots slots(load.max_concurrency > 0 ? load.max_concurrency : std::numeric_limits<int64_t>::max());
  std::vector<std::thread> inflight;
  inflight.reserve(requests.size());
  double at = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    at += gaps[i];
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(at)));
    slots.acquire();
    inflight.emplace_back([&, i] {
      Client client(co);  // one connection per request: arrivals do not wait for a free connection
      out.outcomes[i] = client.send(requests[i], model, t0);
      slots.release();
    });
  }
  for (auto& t : inflight) t.join();
}

}  // namespace

std::string LoadPoint::label() const {
  char buf[64];
  if (mode == Mode::closed) std::snprintf(buf, sizeof buf, "c=%lld", (long long)concurrency);
  else if (std::isinf(rate)) std::snprintf(buf, sizeof buf, "rate=inf");
  else std::snprintf(buf, sizeof buf, "rate=%g", rate);
  return buf;
}

std::vector<double> arrival_gaps(int64_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> gaps(size_t(std::max<int64_t>(n, 0)), 0.0);
  if (!(rate > 0) || std::isinf(rate)) return gaps;
  std::mt19937_64 rng(seed);
  // Mean of gamma(k, theta) is k * theta; theta = 1 / (rate * k) keeps the mean gap at 1 / rate.
  std::gamma_distribution<double> gamma(burstiness, 1.0 / (rate * burstiness));
  for (auto& g : gaps) g = gamma(rng);
  return gaps;
}

RunResult run_load(const ClientOptions& client, const std::string& model, const std::vector<RequestSpec>& requests,
                   const LoadPoint& load) {
  RunResult out;
  out.load = load;
  out.outcomes.resize(requests.size());
  const auto t0 = SteadyClock::now();
  if (load.mode == LoadPoint::Mode::closed) run_closed(client, model, requests, load, out, t0);
  else run_open(client, model, requests, load, out, t0);
  out.duration_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  return out;
}

RunResult run_tenants(const std::vector<TenantLoad>& tenants, const std::string& model) {
  std::vector<RunResult> parts(tenants.size());
  const auto t0 = SteadyClock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < tenants.size(); ++i) {
    threads.emplace_back([&, i] {
      const TenantLoad& t = tenants[i];
      parts[i].outcomes.resize(t.requests.size());
      if (t.load.mode == LoadPoint::Mode::closed) run_closed(t.client, model, t.requests, t.load, parts[i], t0);
      else run_open(t.client, model, t.requests, t.load, parts[i], t0);
    });
  }
  for (auto& t : threads) t.join();
  RunResult out;
  out.duration_s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  out.load = {.mode = LoadPoint::Mode::open, .rate = 0};
  for (size_t i = 0; i < tenants.size(); ++i) {
    out.load.rate += tenants[i].load.rate;
    for (RequestOutcome& o : parts[i].outcomes) {
      o.tenant = tenants[i].name;
      out.outcomes.push_back(std::move(o));
    }
  }
  return out;
}

}  // namespace kvasir::loadgen
