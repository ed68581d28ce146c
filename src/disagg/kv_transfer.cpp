#include "disagg/kv_transfer.h"

#include <algorithm>
#include <memory>

namespace kvasir::disagg {

const char* transfer_end_name(TransferEnd end) {
  switch (end) {
    case TransferEnd::done: return "done";
    case TransferEnd::failed: return "failed";
    case TransferEnd::expired: return "expired";
  }
  return "?";
}

KvReceiver::KvReceiver(runtime::ModelRunner& runner)
    : runner_(runner), format_hash_(hash_format(runner.kv_format())), n_layers_(runner.info().n_layers) {}

Status KvReceiver::expect(uint64_t id, std::vector<int32_t> blocks) {
  if (runner_.kv_block_bytes(0) == 0) return Error{"this runner has no KV block I/O", ErrorCode::invalid_argument};
  std::lock_guard<std::mutex> lock(mutex_);
  if (transfers_.count(id)) return Error{"transfer " + std::to_string(id) + " is already expected", ErrorCode::invalid_argument};
  Transfer t;
  t.received.assign(size_t(n_layers_) * blocks.size(), 0);
  t.blocks = std::move(blocks);
  transfers_.emplace(id, std::move(t));
  return {};
}

void KvReceiver::end(Transfer& t, TransferEnd e, std::string why) {
  if (t.ended) return;
  t.ended = true;
  t.end = e;
  t.why = std::move(why);
  changed_.notify_all();
}

void KvReceiver::reject(const std::string&) { ++counters_.rejected_frames; }

void KvReceiver::on_message(PeerId peer, std::span<const uint8_t> header, std::span<const uint8_t> payload) {
  auto f = parse_header(header, payload.size());
  std::lock_guard<std::mutex> lock(mutex_);
  if (!f) return reject(f.error());
  auto it = transfers_.find(f->transfer_id);
  if (it == transfers_.end() || it->second.ended) return reject("unknown or ended transfer");
  Transfer& t = it->second;
  if (t.peer == 0) t.peer = peer;
  if (f->format_hash != format_hash_) {
    reject("format");
    return end(t, TransferEnd::failed, "the sender's KV format differs from this instance's");
  }
  switch (f->kind) {
    case FrameKind::abort: return end(t, TransferEnd::failed, "the sender aborted the transfer");
    case FrameKind::done:
      if (f->n_blocks != t.blocks.size() || t.n_received != int64_t(t.received.size()))
        return end(t, TransferEnd::failed,
                   "the transfer ended with " + std::to_string(t.n_received) + " of " +
                       std::to_string(t.received.size()) + " layer blocks");
      return end(t, TransferEnd::done, "");
    case FrameKind::blocks: break;
  }
  if (int64_t(f->layer) >= n_layers_ || uint64_t(f->first) + f->n_blocks > t.blocks.size() ||
      f->block_bytes != runner_.kv_block_bytes(f->layer)) {
    reject("geometry");
    return end(t, TransferEnd::failed, "a frame outside the transfer's layers or blocks, or of another block size");
  }
  const auto blocks = std::span<const int32_t>(t.blocks).subspan(f->first, f->n_blocks);
  if (auto s = runner_.import_kv(f->layer, blocks, payload.data()); !s) return end(t, TransferEnd::failed, s.error());
  for (uint32_t i = 0; i < f->n_blocks; ++i) {
    uint8_t& r = t.received[size_t(f->layer) * t.blocks.size() + f->first + i];
    t.n_received += r == 0;
    r = 1;
  }
  counters_.bytes += int64_t(payload.size());
}

void KvReceiver::on_peer_down(PeerId peer) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, t] : transfers_)
    if (t.peer == peer && !t.ended) end(t, TransferEnd::failed, "the sender's connection was lost");
}

TransferEnd KvReceiver::wait(uint64_t id, std::chrono::steady_clock::time_point deadline, std::string* why) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = transfers_.find(id);
  if (it == transfers_.end()) {
    if (why) *why = "no such transfer";
    return TransferEnd::failed;
  }
  changed_.wait_until(lock, deadline, [&] { return it->second.ended; });
  if (!it->second.ended) end(it->second, TransferEnd::expired, "the transfer missed its deadline");
  const TransferEnd e = it->second.end;
  if (why) *why = it->second.why;
  (e == TransferEnd::done ? counters_.done : e == TransferEnd::expired ? counters_.expired : counters_.failed) += 1;
  transfers_.erase(it);
  return e;
}

TransferCounters KvReceiver::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

size_t KvReceiver::n_active() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return transfers_.size();
}

std::shared_ptr<std::vector<uint8_t>> SendBuffers::take(size_t n) {
  std::unique_ptr<std::vector<uint8_t>> b;
  {
    std::lock_guard<std::mutex> lock(spare_->mutex);
    auto& v = spare_->buffers;
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i]->capacity() >= n) {
        b = std::move(v[i]);
        v.erase(v.begin() + ptrdiff_t(i));
        spare_->bytes -= b->capacity();
        break;
      }
  }
  if (!b) b = std::make_unique<std::vector<uint8_t>>();
  b->resize(n);
  return std::shared_ptr<std::vector<uint8_t>>(b.release(), [spare = spare_](std::vector<uint8_t>* v) {
    std::unique_ptr<std::vector<uint8_t>> owned(v);
    std::lock_guard<std::mutex> lock(spare->mutex);
    if (spare->bytes + v->capacity() > (size_t(64) << 20)) return;
    spare->bytes += v->capacity();
    spare->buffers.push_back(std::move(owned));
  });
}

// Completion of the frames in flight: bytes outstanding, the first failure, and the time during
// which any frame was in flight (the transfer's own time, apart from waits for blocks to send).
struct KvSender::InFlight {
  using Clock = std::chrono::steady_clock;
  std::mutex mutex;
  std::condition_variable changed;
  size_t bytes = 0;
  int64_t frames = 0;
  Status failure;
  Clock::time_point busy_since;
  Clock::duration busy{};
  void posted(size_t n) {
    std::lock_guard<std::mutex> lock(mutex);
    if (frames++ == 0) busy_since = Clock::now();
    bytes += n;
  }
  void sent(size_t n, const Status& s) {
    std::lock_guard<std::mutex> lock(mutex);
    bytes -= n;
    if (--frames == 0) busy += Clock::now() - busy_since;
    if (!s && failure) failure = s;
    changed.notify_all();
  }
  Status first_failure() {
    std::lock_guard<std::mutex> lock(mutex);
    return failure;
  }
  template <class Pred>
  bool wait_until(std::chrono::steady_clock::time_point deadline, Pred pred) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_until(lock, deadline, [&] { return pred() || !failure; });
  }
};

KvSender::KvSender(UcxNode& node, PeerId peer, uint64_t id, const runtime::ModelRunner& runner, const SendOptions& o)
    : node_(node), peer_(peer), id_(id), runner_(runner), options_(o), format_hash_(hash_format(runner.kv_format())),
      flight_(std::make_shared<InFlight>()) {}

KvSender::~KvSender() {
  if (!ended_) (void)give_up(Error{"abandoned"});
}

Status KvSender::give_up(Status why) {
  if (!ended_) node_.send(peer_, encode_header({.kind = FrameKind::abort, .transfer_id = id_, .format_hash = format_hash_}), nullptr, {});
  ended_ = true;
  return why;
}

Status KvSender::send(std::span<const int32_t> blocks, uint32_t first_index) {
  if (ended_) return Error{"KV transfer " + std::to_string(id_) + " has ended", ErrorCode::internal};
  const auto missed = [&] { return give_up(Error{"KV transfer " + std::to_string(id_) + " missed its deadline", ErrorCode::unavailable}); };
  InFlight& flight = *flight_;
  const int64_t n_layers = runner_.info().n_layers;
  for (int64_t layer = 0; layer < n_layers && !blocks.empty(); ++layer) {
    const size_t bb = runner_.kv_block_bytes(layer);
    if (bb == 0) return give_up(Error{"this runner has no KV block I/O", ErrorCode::invalid_argument});
    const size_t per_frame = std::max<size_t>(1, options_.max_frame_bytes / bb);
    for (size_t first = 0; first < blocks.size(); first += per_frame) {
      const size_t n = std::min(per_frame, blocks.size() - first);
      const size_t bytes = n * bb;
      // Bounded memory: wait while the window is full.
      if (!flight.wait_until(options_.deadline, [&] { return flight.bytes + bytes <= options_.max_in_flight_bytes || flight.frames == 0; }))
        return missed();
      if (Status f = flight.first_failure(); !f) return give_up(f);
      auto payload = options_.buffers ? options_.buffers->take(bytes) : std::make_shared<std::vector<uint8_t>>(bytes);
      if (auto s = runner_.export_kv(layer, blocks.subspan(first, n), payload->data()); !s) return give_up(s);
      flight.posted(bytes);
      const Frame f{.kind = FrameKind::blocks, .transfer_id = id_, .layer = uint32_t(layer),
                    .first = uint32_t(first_index + first), .n_blocks = uint32_t(n), .block_bytes = uint32_t(bb),
                    .format_hash = format_hash_};
      node_.send(peer_, encode_header(f), std::move(payload), [fl = flight_, bytes](Status s) { fl->sent(bytes, s); });
    }
  }
  return {};
}

Status KvSender::finish(uint32_t n_blocks) {
  if (ended_) return Error{"KV transfer " + std::to_string(id_) + " has ended", ErrorCode::internal};
  const auto missed = [&] { return give_up(Error{"KV transfer " + std::to_string(id_) + " missed its deadline", ErrorCode::unavailable}); };
  InFlight& flight = *flight_;
  if (!flight.wait_until(options_.deadline, [&] { return flight.frames == 0; })) return missed();
  if (Status f = flight.first_failure(); !f) return give_up(f);
  flight.posted(0);
  node_.send(peer_, encode_header({.kind = FrameKind::done, .transfer_id = id_, .n_blocks = n_blocks, .format_hash = format_hash_}),
             nullptr, [fl = flight_](Status s) { fl->sent(0, s); });
  ended_ = true;  // `done` is on its way: an abort now would contradict it
  if (!flight.wait_until(options_.deadline, [&] { return flight.frames == 0; }))
    return Error{"KV transfer " + std::to_string(id_) + " missed its deadline", ErrorCode::unavailable};
  return flight.first_failure();
}

double KvSender::busy_ms() const {
  std::lock_guard<std::mutex> lock(flight_->mutex);
  auto busy = flight_->busy;
  if (flight_->frames > 0) busy += InFlight::Clock::now() - flight_->busy_since;
  return std::chrono::duration<double, std::milli>(busy).count();
}

Status send_kv(UcxNode& node, PeerId peer, uint64_t id, const runtime::ModelRunner& runner,
               std::span<const int32_t> blocks, const SendOptions& options) {
  KvSender sender(node, peer, id, runner, options);
  if (Status s = sender.send(blocks, 0); !s) return s;
  return sender.finish(uint32_t(blocks.size()));
}

}  // namespace kvasir::disagg
