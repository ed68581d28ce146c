// A generation request as the scheduler sees it: token ids and counts, no text, no tensors.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvasir::sched {

using RequestId = int64_t;

// Nanoseconds from an arbitrary origin; injectable so tests control time.
using Clock = std::function<int64_t()>;
int64_t steady_now_ns();

enum class RequestState { Waiting, Running, Finished };

enum class FinishReason { None, Stop, Length, StopString, Abort };
std::string_view to_string(FinishReason reason);

// Service classes: batch work only gets what interactive work leaves, and gives up its seat and
// its step budget to interactive work within one step (Scheduler).
enum class ServiceClass { interactive, batch };
std::string_view to_string(ServiceClass c);

struct RequestOptions {
  int32_t priority = 0;        // within a class: lower runs first; fair share, then FCFS, among equals
  int32_t max_new_tokens = 0;  // 0: only max_model_len bounds the answer
  ServiceClass service_class = ServiceClass::interactive;
  // Fair share: waiting requests of one class and priority are admitted tenant by tenant, the
  // tenant that has received the least service per unit of weight first (sched/wait_queue.h).
  std::string tenant = {};
  double tenant_weight = 1.0;  // > 0
  std::string cache_salt = {}; // tenant salt: prefix-cache hits only within the same salt
  // Computes the prompt and finishes (FinishReason::Length) without a generated token: scoring a
  // prompt, embedding it, warming the prefix cache. update() expects no output for it.
  bool prefill_only = false;
  // false: every token is computed, none served by the prefix cache (the caller needs every
  // row's logits or hidden state). Its blocks still go into the cache for others.
  bool reuse_prefix = true;
};

struct RequestTimings {
  int64_t arrival_ns = -1;
  int64_t first_scheduled_ns = -1;
  int64_t first_token_ns = -1;
  int64_t finished_ns = -1;
  std::vector<int64_t> token_ns;  // when each generated token arrived

  int64_t queue_ns() const { return first_scheduled_ns < 0 ? -1 : first_scheduled_ns - arrival_ns; }
  int64_t ttft_ns() const { return first_token_ns < 0 ? -1 : first_token_ns - arrival_ns; }
  // Mean time per output token after the first; -1 with fewer than two tokens.
  int64_t tpot_ns() const {
    if (token_ns.size() < 2) return -1;
    return (token_ns.back() - token_ns.front()) / int64_t(token_ns.size() - 1);
  }
};

struct Request {
  RequestId id = 0;
  std::vector<int32_t> tokens;     // prompt, then generated tokens
  int32_t num_prompt_tokens = 0;
  // KV is written for tokens [0, num_computed_tokens). Advanced when a step schedules them.
  int32_t num_computed_tokens = 0;
  int32_t num_cached_tokens = 0;   // served by the prefix cache at the last admission
  RequestOptions options;
  RequestState state = RequestState::Waiting;
  FinishReason finish_reason = FinishReason::None;
  int32_t num_preemptions = 0;
  uint64_t arrival_seq = 0;        // FCFS order
  uint64_t admit_seq = 0;          // order of the latest admission; preemption picks the largest
  RequestTimings timings;
  // Speculative decoding: tokens proposed after the last one, verified in the next step
  // (Scheduler::set_draft; consumed or dropped by that step), and the scheduled rows' tokens (the
  // last token, then the draft) while that step runs.
  std::vector<int32_t> draft;
  std::vector<int32_t> step_tokens;

  int32_t num_tokens() const { return int32_t(tokens.size()); }
  int32_t num_generated() const { return int32_t(tokens.size()) - num_prompt_tokens; }
  std::span<const int32_t> generated() const {
    return std::span<const int32_t>(tokens).subspan(size_t(num_prompt_tokens));
  }
};

}  // namespace kvasir::sched
