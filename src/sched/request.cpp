#include "sched/request.h"

#include <chrono>

namespace kvasir::sched {

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string_view to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::None: return "none";
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::StopString: return "stop_string";
    case FinishReason::Abort: return "abort";
  }
  return "unknown";
}

std::string_view to_string(ServiceClass c) { return c == ServiceClass::batch ? "batch" : "interactive"; }

}  // namespace kvasir::sched
