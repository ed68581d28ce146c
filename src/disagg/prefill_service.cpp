#include "disagg/prefill_service.h"

#include <algorithm>

#include "disagg/kv_transfer.h"

namespace kvasir::disagg {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

Result<PrefillRequest> parse_prefill_request(const nlohmann::ordered_json& b) {
  auto bad = [](const std::string& field) {
    return Error{"prefill request: '" + field + "' is missing or has the wrong type", ErrorCode::invalid_argument};
  };
  if (!b.is_object()) return Error{"prefill request: not a JSON object", ErrorCode::invalid_argument};
  PrefillRequest r;
  if (!b.contains("transfer_id") || !b["transfer_id"].is_number_unsigned()) return bad("transfer_id");
  r.transfer_id = b["transfer_id"].get<uint64_t>();
  if (!b.contains("tokens") || !b["tokens"].is_array() || b["tokens"].empty()) return bad("tokens");
  for (const auto& t : b["tokens"]) {
    if (!t.is_number_integer()) return bad("tokens");
    const int64_t v = t.get<int64_t>();
    if (v < 0 || v > INT32_MAX) return bad("tokens");
    r.tokens.push_back(int32_t(v));
  }
  if (b.contains("cache_salt")) {
    if (!b["cache_salt"].is_string()) return bad("cache_salt");
    r.cache_salt = b["cache_salt"].get<std::string>();
  }
  if (!b.contains("skip_blocks") || !b["skip_blocks"].is_number_integer()) return bad("skip_blocks");
  const int64_t skip = b["skip_blocks"].get<int64_t>();
  if (skip < 0 || skip > int64_t(r.tokens.size())) return bad("skip_blocks");
  r.skip_blocks = int32_t(skip);
  if (!b.contains("kv_format") || !b["kv_format"].is_string()) return bad("kv_format");
  r.kv_format = b["kv_format"].get<std::string>();
  if (!b.contains("target_host") || !b["target_host"].is_string() || b["target_host"].get<std::string>().empty())
    return bad("target_host");
  r.target_host = b["target_host"].get<std::string>();
  if (!b.contains("target_port") || !b["target_port"].is_number_integer()) return bad("target_port");
  const int64_t port = b["target_port"].get<int64_t>();
  if (port < 1 || port > 65535) return bad("target_port");
  r.target_port = uint16_t(port);
  if (b.contains("timeout_ms")) {
    if (!b["timeout_ms"].is_number_integer()) return bad("timeout_ms");
    const int64_t t = b["timeout_ms"].get<int64_t>();
    if (t < 1 || t > 600000) return bad("timeout_ms");
    r.timeout = std::chrono::milliseconds(t);
  }
  return r;
}

nlohmann::json to_json(const PrefillRequest& r) {
  return {{"transfer_id", r.transfer_id}, {"tokens", r.tokens},           {"cache_salt", r.cache_salt},
          {"skip_blocks", r.skip_blocks}, {"kv_format", r.kv_format},     {"target_host", r.target_host},
          {"target_port", r.target_port}, {"timeout_ms", r.timeout.count()}};
}

Result<std::unique_ptr<KvPusher>> KvPusher::create(engine::Engine& engine) {
  std::unique_ptr<KvPusher> p(new KvPusher(engine));
  KvPusher* raw = p.get();
  auto node = UcxNode::create({}, {.on_message = {}, .on_peer_down = [raw](PeerId peer, const std::string&) { raw->forget(peer); }});
  if (!node) return Error{node.error(), node.error_code()};
  p->node_ = std::move(*node);
  return p;
}

void KvPusher::forget(PeerId peer) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = peers_.begin(); it != peers_.end(); ++it)
    if (it->second == peer) {
      peers_.erase(it);
      return;
    }
}

Result<PeerId> KvPusher::peer_for(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  const std::string key = host + ":" + std::to_string(port);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = peers_.find(key); it != peers_.end()) return it->second;
  }
  auto peer = node_->connect(host, port, timeout);
  if (!peer) return peer;
  std::lock_guard<std::mutex> lock(mutex_);
  peers_[key] = *peer;
  return *peer;
}

// The prompt runs as a pinned prefill-only request; the connection to the decode instance is made
// while it runs, and each delta's newly pinned blocks (a chunk's worth) are sent while the next
// chunk computes, so only the last chunk's blocks are sent after the prefill ends.
Result<PrefillResult> KvPusher::push(const PrefillRequest& r) {
  const auto t0 = Clock::now();
  const auto deadline = t0 + r.timeout;
  auto fail = [&](Error e) -> Result<PrefillResult> {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.failed;
    return e;
  };
  const std::string mine = engine_.runner().kv_format();
  if (r.kv_format != mine)
    return fail(Error{"KV formats differ: this prefill instance stores '" + mine + "', the decode instance '" + r.kv_format + "'",
                      ErrorCode::invalid_argument});
  engine::GenerationParams p;
  p.prompt = r.tokens;
  p.stop.max_tokens = 0;
  p.cache_salt = r.cache_salt;
  p.pin_kv = true;
  auto submitted = engine_.submit(std::move(p));
  if (!submitted) return fail(Error{submitted.error(), submitted.error_code()});
  engine::RequestStream& stream = **submitted;
  // The pin goes back however this ends (frames in flight carry copies, not the blocks).
  int64_t hold = 0;
  struct Release {
    engine::Engine& e;
    const int64_t& hold;
    ~Release() {
      if (hold) e.call([&](engine::EngineCore& c) { c.release_kv(hold); });
    }
  } release{engine_, hold};
  engine::Delta d;
  auto stop_prefill = [&] {
    engine_.abort(stream.id());
    while (stream.next(d))
      if (d.kv_hold) hold = d.kv_hold;
  };
  auto left = [&] { return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()); };

  auto peer = peer_for(r.target_host, r.target_port, left());
  if (!peer) {
    stop_prefill();
    return fail(Error{peer.error(), peer.error_code()});
  }
  KvSender sender(*node_, *peer, r.transfer_id, engine_.runner(), {.deadline = deadline, .buffers = &buffers_});
  auto send_failed = [&](Status s) {
    stop_prefill();
    sender.abort();
    node_->disconnect(*peer);  // a fresh connection next time
    forget(*peer);
    return fail(Error{s.error(), s.error_code()});
  };

  std::vector<int32_t> pinned;  // the prompt's blocks pinned so far; [skip, sent) are on their way
  const size_t skip = size_t(r.skip_blocks);
  size_t sent = skip;
  int32_t pieces = 0;
  engine::FinishReason finish = engine::FinishReason::None;
  while (true) {
    if (left().count() <= 0 || !stream.wait_ready(left())) {
      stop_prefill();
      return fail(Error{"the prefill missed its deadline", ErrorCode::unavailable});
    }
    if (!stream.next(d)) break;
    if (d.finish != engine::FinishReason::None) finish = d.finish;
    if (!d.kv_hold) continue;
    hold = d.kv_hold;
    if (d.kv_blocks.size() < pinned.size() || !std::equal(pinned.begin(), pinned.end(), d.kv_blocks.begin()))
      return send_failed(Error{"the engine moved blocks it had pinned", ErrorCode::internal});
    pinned = std::move(d.kv_blocks);
    if (pinned.size() <= sent) continue;
    if (Status s = sender.send(std::span<const int32_t>(pinned).subspan(sent), uint32_t(sent - skip)); !s)
      return send_failed(s);
    sent = pinned.size();
    ++pieces;
  }
  const auto prefill_end = Clock::now();
  const size_t full = r.tokens.size() / size_t(engine_.runner().info().block_size);
  if (finish != engine::FinishReason::Length || pinned.size() != full)
    return send_failed(Error{"the prefill did not complete", ErrorCode::unavailable});
  if (Status s = sender.finish(uint32_t(full > skip ? full - skip : 0)); !s) return send_failed(s);
  PrefillResult out;
  out.prefill_ms = std::chrono::duration<double, std::milli>(prefill_end - t0).count();
  out.transfer_ms = sender.busy_ms();
  out.tail_ms = ms_since(prefill_end);
  out.n_blocks = int32_t(sent - skip);
  out.n_pieces = pieces;
  for (int64_t il = 0; il < engine_.runner().info().n_layers; ++il)
    out.bytes += int64_t(engine_.runner().kv_block_bytes(il)) * out.n_blocks;
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.done;
  counters_.blocks += out.n_blocks;
  counters_.bytes += out.bytes;
  counters_.transfer_ms += out.transfer_ms;
  counters_.tail_ms += out.tail_ms;
  counters_.prefill_ms += out.prefill_ms;
  return out;
}

PushCounters KvPusher::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

}  // namespace kvasir::disagg
