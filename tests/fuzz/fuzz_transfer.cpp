// The KV transfer protocol's receiving end under hostile frames: any bytes as a sequence of
// (header, payload) messages into a KvReceiver expecting two transfers over a runner with two
// layers of different block sizes. Nothing may crash or write outside the expected blocks.
#include <cstdint>
#include <cstring>
#include <vector>

#include "disagg/kv_transfer.h"

namespace {

class BufferRunner : public kvasir::runtime::ModelRunner {
 public:
  BufferRunner() {
    info_.n_layers = 2;
    info_.n_kv_blocks = 8;
    for (int l = 0; l < 2; ++l) kv_[l].assign(8 * kv_block_bytes(l), 0);
  }
  const kvasir::runtime::RunnerInfo& info() const override { return info_; }
  kvasir::Result<const float*> forward(const kvasir::Batch&) override { return kvasir::Error{"no forward"}; }
  size_t kv_block_bytes(int64_t layer) const override { return layer == 0 ? 64 : 128; }
  std::string kv_format() const override { return "fuzz"; }
  kvasir::Status import_kv(int64_t layer, std::span<const int32_t> blocks, const uint8_t* src) override {
    const size_t n = kv_block_bytes(layer);
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i] < 0 || blocks[i] >= 8) __builtin_trap();  // the receiver let a bad block through
      std::memcpy(kv_[layer].data() + size_t(blocks[i]) * n, src + i * n, n);
    }
    return {};
  }

 private:
  kvasir::runtime::RunnerInfo info_;
  std::vector<uint8_t> kv_[2];
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  BufferRunner runner;
  kvasir::disagg::KvReceiver rx(runner);
  (void)rx.expect(1, {0, 1, 2});
  (void)rx.expect(2, {7});
  const uint64_t fmt = kvasir::disagg::hash_format("fuzz");
  size_t at = 0;
  while (at + 3 <= size) {
    // A message: a flag byte (bit 0: a well-formed header from the next 16 bytes), a payload size.
    const uint8_t flag = data[at];
    const size_t payload_n = std::min<size_t>(data[at + 1] | (size_t(data[at + 2]) << 8), 4096);
    at += 3;
    std::vector<uint8_t> header;
    if (flag & 1) {
      if (at + 12 > size) break;
      kvasir::disagg::Frame f;
      f.kind = kvasir::disagg::FrameKind(1 + data[at] % 3);
      f.transfer_id = 1 + data[at + 1] % 3;
      f.layer = data[at + 2] % 4;
      f.first = data[at + 3] % 5;
      f.n_blocks = data[at + 4] % 5;
      f.block_bytes = (flag & 2) ? 64u * (1 + data[at + 5] % 3) : data[at + 5];
      f.format_hash = (flag & 4) ? fmt : uint64_t(data[at + 6]);
      header = kvasir::disagg::encode_header(f);
      at += 12;
    } else {
      const size_t hn = std::min<size_t>(size - at, 40);
      header.assign(data + at, data + at + hn);
      at += hn;
    }
    const size_t take = std::min(payload_n, size - at);
    std::vector<uint8_t> payload(data + at, data + at + take);
    at += take;
    rx.on_message(1 + (flag >> 7), header, payload);
    if (flag & 0x40) rx.on_peer_down(1);
  }
  (void)rx.wait(1, std::chrono::steady_clock::now());
  (void)rx.wait(2, std::chrono::steady_clock::now());
  return 0;
}
