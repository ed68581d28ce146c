#include "disagg/decode_service.h"

#include <httplib.h>

#include <algorithm>
#include <random>

#include "disagg/prefill_service.h"

namespace kvasir::disagg {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Result<std::unique_ptr<KvPuller>> KvPuller::create(engine::Engine& engine, const PullOptions& o) {
  std::unique_ptr<KvPuller> p(new KvPuller(engine, o));
  p->rx_ = std::make_unique<KvReceiver>(engine.runner());
  KvReceiver* rx = p->rx_.get();
  auto node = UcxNode::create(
      {.listen_host = o.listen_host, .listen_port = o.listen_port},
      {.on_message = [rx](PeerId peer, std::span<const uint8_t> h, std::span<const uint8_t> b) { rx->on_message(peer, h, b); },
       .on_peer_down = [rx](PeerId peer, const std::string&) { rx->on_peer_down(peer); }});
  if (!node) return Error{node.error(), node.error_code()};
  p->node_ = std::move(*node);
  // Transfer ids from a random start: a late frame of an earlier run never matches a new transfer.
  p->next_id_ = std::random_device{}() | (uint64_t(std::random_device{}()) << 32);
  return p;
}

Status KvPuller::pull(std::span<const int32_t> tokens, const std::string& salt, const std::string& prefill_url) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + options_.timeout;
  auto count = [&](int64_t PullCounters::*field) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++(counters_.*field);
  };
  if (prefill_url.rfind("http://", 0) != 0 || prefill_url.find('/', 7) != std::string::npos) {
    count(&PullCounters::failed);
    return Error{"the prefill instance must be named as http://host:port, got '" + prefill_url + "'",
                 ErrorCode::invalid_argument};
  }
  if (!options_.allowed_prefill.empty() &&
      std::find(options_.allowed_prefill.begin(), options_.allowed_prefill.end(), prefill_url) ==
          options_.allowed_prefill.end()) {
    count(&PullCounters::failed);
    return Error{"'" + prefill_url + "' is not among this instance's --prefill-peer", ErrorCode::invalid_argument};
  }
  const int32_t block = int32_t(engine_.runner().info().block_size);
  if (int32_t(tokens.size()) < std::max(options_.min_tokens, block)) {
    count(&PullCounters::skipped);
    return {};
  }
  const int64_t hold = engine_.new_hold_id();
  Result<sched::Scheduler::KvReservation> res = Error{"the engine is shutting down", ErrorCode::unavailable};
  engine_.call([&](engine::EngineCore& c) { res = c.reserve_kv(hold, tokens, salt); });
  if (!res) {
    count(&PullCounters::failed);
    return Error{res.error(), res.error_code()};
  }
  struct Release {  // the hold goes back however this ends (after a commit its blocks stay cached)
    engine::Engine& e;
    int64_t hold;
    ~Release() { e.call([&](engine::EngineCore& c) { c.release_kv(hold); }); }
  } release{engine_, hold};
  if (res->n_cached == int32_t(res->blocks.size())) {
    count(&PullCounters::skipped);
    return {};
  }
  const uint64_t id = next_id_.fetch_add(1);
  std::vector<int32_t> wanted(res->blocks.begin() + res->n_cached, res->blocks.end());
  const int32_t n_wanted = int32_t(wanted.size());
  if (Status s = rx_->expect(id, std::move(wanted)); !s) {
    count(&PullCounters::failed);
    return s;
  }
  // Ask the prefill instance; its answer comes once every frame was sent.
  PrefillRequest req{.transfer_id = id,
                     .tokens = std::vector<int32_t>(tokens.begin(), tokens.end()),
                     .cache_salt = salt,
                     .skip_blocks = res->n_cached,
                     .kv_format = engine_.runner().kv_format(),
                     .target_host = options_.listen_host,
                     .target_port = node_->port(),
                     .timeout = options_.timeout};
  std::string http_error;
  {
    httplib::Client client(prefill_url);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    client.set_connection_timeout(std::chrono::milliseconds(std::max<int64_t>(left.count(), 1)));
    client.set_read_timeout(std::chrono::milliseconds(std::max<int64_t>(left.count(), 1)));
    client.set_write_timeout(std::chrono::milliseconds(std::max<int64_t>(left.count(), 1)));
    httplib::Headers headers;
    if (!options_.api_key.empty()) headers.emplace("Authorization", "Bearer " + options_.api_key);
    auto r = client.Post("/internal/kv/prefill", headers, to_json(req).dump(), "application/json");
    if (!r) http_error = "the prefill instance at " + prefill_url + " did not answer (" + httplib::to_string(r.error()) + ")";
    else if (r->status != 200) http_error = "the prefill instance answered " + std::to_string(r->status) + ": " + r->body.substr(0, 300);
  }
  // After a failed ask the transfer ends now; else it has until the deadline for its last frames.
  std::string why;
  const TransferEnd end = rx_->wait(id, http_error.empty() ? deadline : Clock::now(), &why);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counters_.rejected_frames = rx_->counters().rejected_frames;
  }
  if (!http_error.empty() || end != TransferEnd::done) {
    count(end == TransferEnd::expired && http_error.empty() ? &PullCounters::expired : &PullCounters::failed);
    return Error{http_error.empty() ? why : http_error, ErrorCode::unavailable};
  }
  Status committed = Error{"the engine is shutting down", ErrorCode::unavailable};
  engine_.call([&](engine::EngineCore& c) { committed = c.commit_kv(hold, tokens); });
  if (!committed) {
    count(&PullCounters::failed);
    return committed;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.done;
  counters_.blocks += n_wanted;
  counters_.bytes = rx_->counters().bytes;
  counters_.ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return {};
}

PullCounters KvPuller::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

}  // namespace kvasir::disagg
