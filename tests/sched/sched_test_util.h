// Helpers for scheduler tests: compact views of a step and a fake model that "samples" tokens.
#pragma once
#include <gtest/gtest.h>

#include <numeric>
#include <ostream>
#include <vector>

#include "sched/scheduler.h"

namespace kvasir::sched::test {

struct Chunk {
  RequestId id;
  int32_t start, end;
  bool logits;
  bool operator==(const Chunk&) const = default;
};
inline std::ostream& operator<<(std::ostream& os, const Chunk& c) {
  return os << "{" << c.id << ", [" << c.start << "," << c.end << ")" << (c.logits ? ", logits" : "") << "}";
}
using Chunks = std::vector<Chunk>;

inline Chunks chunks_of(const SchedulerOutput& out) {
  Chunks v;
  for (const auto& s : out.seqs) v.push_back({s.id, s.start, s.end, s.want_logits});
  return v;
}

inline Scheduler make_sched(SchedulerConfig config) {
  auto r = Scheduler::create(std::move(config));
  EXPECT_TRUE(r.ok()) << r.error();
  return std::move(r).value();
}

inline std::vector<int32_t> range(int32_t first, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// The token the fake model samples: depends only on the request and how many it generated.
inline int32_t fake_token(const Scheduler& s, RequestId id) {
  const Request* r = s.find(id);
  return 1000 * int32_t(id) + (r ? r->num_generated() : 0);
}

// One step plus update() with fake tokens; returns the step's chunks.
inline Chunks run_step(Scheduler& s) {
  const SchedulerOutput& out = s.step();
  Chunks c = chunks_of(out);
  std::vector<SeqOutput> outputs;
  for (const auto& seq : out.seqs) {
    if (seq.want_logits) outputs.push_back({.id = seq.id, .token = fake_token(s, seq.id)});
  }
  Status st = s.update(outputs);
  EXPECT_TRUE(st.ok()) << st.error();
  Status kv = s.kv().check();
  EXPECT_TRUE(kv.ok()) << kv.error();
  return c;
}

// Virtual time for scheduler tests: a step costs decode_fixed with any decodes, plus
// decode_per_seq per decode, plus prefill_per_token per prefill token (by default: 5 ms with
// decodes, 1 ms per prefill token). The scheduler's clock reads `now`.
struct FakeModel {
  static constexpr int64_t kMs = 1'000'000;
  int64_t now = 0;
  int64_t decode_fixed = 5 * kMs, decode_per_seq = 0, prefill_per_token = kMs;
  int64_t cost(const SchedulerOutput& out) const {
    int64_t decodes = 0, prefill = 0;
    for (const auto& s : out.seqs) (s.end - s.start == 1 && s.start > 0 ? decodes : prefill) += s.end - s.start;
    return (decodes > 0 ? decode_fixed : 0) + decodes * decode_per_seq + prefill * prefill_per_token;
  }
};

// One step plus update() with fake tokens, advancing the model's clock by the step's cost.
inline Chunks timed_step(Scheduler& s, FakeModel& m) {
  const SchedulerOutput& out = s.step();
  Chunks c = chunks_of(out);
  m.now += m.cost(out);
  std::vector<SeqOutput> outputs;
  for (const auto& seq : out.seqs)
    if (seq.want_logits) outputs.push_back({.id = seq.id, .token = fake_token(s, seq.id)});
  EXPECT_TRUE(s.update(outputs).ok());
  EXPECT_TRUE(s.kv().check().ok());
  return c;
}

}  // namespace kvasir::sched::test
