// What each side of disaggregation counts, for /metrics: plain values, so that the metrics code
// needs neither the engine nor UCX.
#pragma once
#include <cstdint>

namespace kvasir::disagg {

// A prefill instance's KV pushes.
struct PushCounters {
  int64_t done = 0, failed = 0, blocks = 0, bytes = 0;
  double transfer_ms = 0, prefill_ms = 0;  // transfer: while frames were in flight
  double tail_ms = 0;  // transfer time after the prefills ended (the rest overlapped them)
};

// A decode instance's KV pulls.
struct PullCounters {
  int64_t done = 0, failed = 0, expired = 0, skipped = 0;  // skipped: short, or every block already here
  int64_t blocks = 0, bytes = 0, rejected_frames = 0;
  double ms = 0;  // time of the completed pulls
};

}  // namespace kvasir::disagg
