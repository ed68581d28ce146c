// Engine: the thread-safe front. One loop thread owns the EngineCore; submit/abort only queue
// work under the mutex, so the forward pass never runs while holding it.
#include "engine/engine.h"

#include <cmath>
#include <cstdio>

#include "sched/ttft_forecast.h"

namespace kvasir::engine {

namespace {

sched::Arrival arrival_of(const GenerationParams& p) {
  return {p.service_class, p.priority, p.tenant, p.tenant_weight, int64_t(p.prompt.size())};
}

}  // namespace

void RequestStream::push(Delta d) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(d));
  }
  ready_.notify_all();
}

bool RequestStream::next(Delta& out) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (drained_) return false;
  ready_.wait(lock, [&] { return !queue_.empty(); });
  out = std::move(queue_.front());
  queue_.pop_front();
  if (out.finish != FinishReason::None) drained_ = true;
  return true;
}

bool RequestStream::wait_ready(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  return ready_.wait_for(lock, timeout, [&] { return drained_ || !queue_.empty(); });
}

// stats_ starts from the core's, so a scrape before the first step shows the pool's size.
Engine::Engine(std::unique_ptr<EngineCore> core)
    : core_(std::move(core)), stats_(core_->stats()), thread_([this] { loop(); }) {}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

Result<std::shared_ptr<RequestStream>> Engine::submit(GenerationParams params) {
  if (auto s = core_->validate(params); !s) return Error{s.error(), ErrorCode::invalid_argument};
  // Stored KV blocks of the prompt are read here, on the caller's thread, so that the engine
  // thread only registers them (engine/kv_tiering.h).
  core_->prefetch_kv(params, [this](const std::function<void()>& fn) { call([&](EngineCore&) { fn(); }); });
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_ || draining_) return Error{"the engine is shutting down", ErrorCode::unavailable};
    int64_t forecast_ns = -1;
    if (params.ttft_deadline_ms > 0)
      if (auto refusal = refuse_late(params, &forecast_ns)) {
        ++num_refused_;
        return *refusal;
      }
    const RequestId id = next_id_++;
    if (forecast_ns >= 0 && double(forecast_ns) >= 0.1 * params.ttft_deadline_ms * 1e6) forecasts_[id] = forecast_ns;
    stream = std::make_shared<RequestStream>(id);
    streams_[id] = stream;
    pending_adds_.emplace_back(id, std::move(params));
  }
  work_.notify_all();
  return stream;
}

std::optional<Error> Engine::refuse_late(const GenerationParams& params, int64_t* forecast_ns) const {
  sched::QueueLoad load = load_;
  for (const auto& [id, queued] : pending_adds_) sched::add_arrival(load, arrival_of(queued));
  *forecast_ns = sched::forecast_ttft_ns(load, arrival_of(params));
  const double forecast_ms = double(*forecast_ns) / 1e6 * calibration_.factor();
  if (*forecast_ns < 0 || forecast_ms <= params.ttft_deadline_ms) return std::nullopt;
  char msg[200];
  std::snprintf(msg, sizeof msg, "the first token cannot come within the TTFT deadline of %.0f ms: it is forecast in %.0f ms",
                params.ttft_deadline_ms, forecast_ms);
  // Trying again is worth it once the work ahead has shrunk by the excess.
  return Error{msg, ErrorCode::exhausted, int64_t(std::ceil(forecast_ms - params.ttft_deadline_ms))};
}

void Engine::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_aborts_.push_back(id);
  }
  work_.notify_all();
}

EngineStats Engine::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  EngineStats s = stats_;
  s.num_refused = num_refused_;
  return s;
}

bool Engine::call(const std::function<void(EngineCore&)>& fn) {
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return false;
    pending_calls_.push_back([&] {
      fn(*core_);
      std::lock_guard<std::mutex> l(done_mutex);
      done = true;
      done_cv.notify_all();
    });
  }
  work_.notify_all();
  std::unique_lock<std::mutex> l(done_mutex);
  done_cv.wait(l, [&] { return done; });
  return true;
}

bool Engine::drain(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  draining_ = true;
  work_.notify_all();
  return work_.wait_until(lock, deadline, [&] { return streams_.empty() && pending_adds_.empty(); });
}

void Engine::abort_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [id, stream] : streams_) pending_aborts_.push_back(id);
  }
  work_.notify_all();
}

void Engine::loop() {
  std::vector<std::pair<RequestId, GenerationParams>> adds;
  std::vector<RequestId> aborts;
  std::vector<std::function<void()>> calls;
  std::vector<Delta> deltas;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_.wait(lock, [&] {
        return stop_ || !pending_adds_.empty() || !pending_aborts_.empty() || !pending_calls_.empty() ||
               core_->has_unfinished();
      });
      if (stop_) {  // abort everything still queued or running, deliver the final deltas, exit
        for (auto& [id, stream] : streams_) pending_aborts_.push_back(id);
        for (auto& [id, params] : pending_adds_) {
          Delta d{.id = id, .finish = FinishReason::Abort};
          streams_[id]->push(std::move(d));
          streams_.erase(id);
          forecasts_.erase(id);
        }
        pending_adds_.clear();
      }
      adds.swap(pending_adds_);
      for (const auto& [id, params] : adds) sched::add_arrival(load_, arrival_of(params));  // until the step's load
      aborts.swap(pending_aborts_);
      calls.swap(pending_calls_);
    }
    for (auto& fn : calls) fn();  // between steps: the core is the loop's alone here
    calls.clear();
    for (auto& [id, params] : adds) {
      if (auto s = core_->add_request_with_id(id, std::move(params)); !s) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (auto it = streams_.find(id); it != streams_.end()) {
          it->second->push(Delta{.id = id, .finish = FinishReason::Abort});
          streams_.erase(it);
          forecasts_.erase(id);
        }
      }
    }
    adds.clear();
    for (RequestId id : aborts) core_->abort(id);
    aborts.clear();
    deltas.clear();
    if (core_->has_unfinished()) {
      if (auto s = core_->step(deltas); !s) std::fprintf(stderr, "engine: %s\n", s.error().c_str());
    }
    // Every step, outside the lock (it walks the queue): a request with a deadline may come at any
    // time and must be forecast from the current queue, not the one before a deadline-free stretch.
    sched::QueueLoad load = core_->load();
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& d : deltas) {
      auto it = streams_.find(d.id);
      if (it == streams_.end()) continue;
      const bool last = d.finish != FinishReason::None;
      if (last)
        if (auto f = forecasts_.find(d.id); f != forecasts_.end()) {
          if (d.timings.ttft_ms >= 0) calibration_.observe(double(f->second), d.timings.ttft_ms * 1e6);
          forecasts_.erase(f);
        }
      it->second->push(std::move(d));
      if (last) streams_.erase(it);
    }
    stats_ = core_->stats();
    load_ = std::move(load);
    if (streams_.empty()) work_.notify_all();  // wakes drain()
    if (stop_ && streams_.empty() && !core_->has_unfinished()) return;
  }
}

}  // namespace kvasir::engine
