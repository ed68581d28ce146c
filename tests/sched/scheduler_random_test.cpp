// Randomized scheduler test against a fake model whose "KV" at a position is a hash of the salt and
// the whole prefix up to it. Every step checks that each sequence reads exactly its own prefix
// (so prefix-cache hits, preemption and recompute never alias KV), that it writes only blocks
// nobody shares, and that block reference counts match the block tables. At the end every request
// has finished within a bounded number of steps and every block is free.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <unordered_map>

#include "sched/scheduler.h"
#include "sched_test_util.h"

using namespace kvasir;
using namespace kvasir::sched;
using namespace kvasir::sched::test;

namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

struct Params {
  uint32_t seed = 1;
  int32_t num_ops = 3000;
  bool priorities = false;
  int32_t max_chunk_tokens = 0;
  bool enable_prefix_cache = true;
  kv::BlockHasher hasher = {};
  int64_t tpot_slo_ns = 0;  // with a clock that advances 1 ms per reading
  bool drafts = false;      // decoding requests carry random drafts; a random prefix is accepted
  bool tenants = false;     // three tenants of random weights, interactive and batch requests
  bool reserve_kv = false;
};

class Harness {
 public:
  explicit Harness(const Params& p)
      : p_(p),
        rng_(p.seed),
        s_(make_sched({.max_batch_tokens = 16,
                       .max_seqs = 6,
                       .block_size = 4,
                       .num_blocks = 24,
                       .max_model_len = 64,
                       .max_chunk_tokens = p.max_chunk_tokens,
                       .enable_prefix_cache = p.enable_prefix_cache,
                       .tpot_slo_ns = p.tpot_slo_ns,
                       .reserve_kv = p.reserve_kv,
                       .model_id = "fake",
                       .hasher = p.hasher,
                       .clock = [this] { return now_ns_ += 1'000'000; }})),
        kv_(size_t(24 * 4), 0) {
    // A few shared prefixes (system prompts, earlier turns) of different lengths.
    for (int32_t len : {0, 3, 8, 13, 24, 40}) prefixes_.push_back(random_tokens(len));
  }

  void run() {
    for (int32_t op = 0; op < p_.num_ops; ++op) {
      const int32_t dice = pick(0, 99);
      if (dice < 30 && int32_t(arrived_.size()) - num_done_ < kMaxActive) {
        add();
      } else if (dice < 33) {
        abort_random();
      } else {
        step();
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
    // Drain: no more arrivals; everything must finish.
    for (int32_t i = 0; i < 20000 && s_.has_unfinished(); ++i) {
      step();
      if (::testing::Test::HasFatalFailure()) return;
    }
    EXPECT_FALSE(s_.has_unfinished());
    collect();
    EXPECT_EQ(num_done_, int32_t(arrived_.size()));
    const kv::KvManager& kv = s_.kv();
    EXPECT_EQ(kv.num_seqs(), 0);
    EXPECT_EQ(kv.num_free_blocks(), kv.num_blocks());
    for (kv::BlockId b = 0; b < kv.num_blocks(); ++b) EXPECT_EQ(kv.pool().ref_count(b), 0);
    EXPECT_TRUE(kv.check().ok()) << kv.check().error();
    EXPECT_GT(num_steps_, 500);
  }

  int32_t max_lifetime_steps() const { return max_lifetime_; }
  int64_t num_preemptions() const { return s_.counters().num_preemptions; }
  int64_t num_prefill_held() const { return s_.counters().num_prefill_held; }
  int64_t num_hit_tokens() const { return s_.kv().cache().counters().num_hit_tokens; }
  const SchedulerCounters& counters() const { return s_.counters(); }

  static constexpr int32_t kMaxActive = 12;

 private:
  int32_t pick(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng_); }

  std::vector<int32_t> random_tokens(int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = pick(0, 5);  // tiny vocabulary: identical blocks happen by chance too
    return t;
  }

  void add() {
    std::vector<int32_t> prompt = prefixes_[size_t(pick(0, int32_t(prefixes_.size()) - 1))];
    auto tail = random_tokens(pick(1, 30));
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    if (prompt.size() > 60) prompt.resize(60);
    RequestOptions o;
    o.priority = p_.priorities ? pick(0, 2) : 0;
    o.max_new_tokens = pick(0, 4) == 0 ? 0 : pick(1, 24);
    o.cache_salt = pick(0, 3) == 0 ? "tenant" : "";
    if (p_.tenants) {
      const int32_t t = pick(0, 2);
      o.tenant = std::string(1, char('a' + t));
      o.tenant_weight = 1.0 + t;
      o.service_class = pick(0, 2) == 0 ? ServiceClass::batch : ServiceClass::interactive;
    }
    const RequestId id = next_id_++;
    salt_of_[id] = o.cache_salt;
    ASSERT_TRUE(s_.add_request(id, prompt, o).ok());
    arrived_[id] = num_steps_;
  }

  // Any active request, waiting or running.
  RequestId random_active() {
    std::vector<RequestId> ids;
    for (const auto& [id, step] : arrived_) {
      if (s_.find(id)) ids.push_back(id);
    }
    if (ids.empty()) return -1;
    std::sort(ids.begin(), ids.end());
    return ids[size_t(pick(0, int32_t(ids.size()) - 1))];
  }

  void abort_random() {
    RequestId id = random_active();
    if (id >= 0) {
      ASSERT_TRUE(s_.abort(id).ok());
    }
  }

  // KV the fake model writes at `pos` of request `id`: depends on the salt and tokens [0, pos].
  uint64_t kv_value(const Request& r, int32_t pos) {
    std::vector<uint64_t>& h = prefix_hash_[r.id];
    if (h.empty()) h.push_back(mix(std::hash<std::string>{}(salt_of_[r.id]) + 1));  // h[0]: salt only
    while (int32_t(h.size()) <= pos + 1) {
      const size_t p = h.size() - 1;
      h.push_back(mix(h.back() ^ (uint64_t(uint32_t(r.tokens[p])) + 0x9e3779b97f4a7c15ULL * (p + 1))));
    }
    return h[size_t(pos) + 1];
  }

  // The KV value at `pos` if the request's tokens were `tokens` (a draft appended): the same chain
  // as kv_value, not cached, since a draft may be rejected.
  uint64_t kv_value_with(const Request& r, const std::vector<int32_t>& tokens, int32_t pos) {
    uint64_t h = mix(std::hash<std::string>{}(salt_of_[r.id]) + 1);
    for (int32_t p = 0; p <= pos; ++p)
      h = mix(h ^ (uint64_t(uint32_t(tokens[size_t(p)])) + 0x9e3779b97f4a7c15ULL * uint64_t(p + 1)));
    return h;
  }

  void propose_drafts() {
    for (const auto& [id, step] : arrived_) {
      const Request* r = s_.find(id);
      if (!r || r->state != RequestState::Running || r->num_tokens() - r->num_computed_tokens != 1) continue;
      if (pick(0, 1) == 0) continue;
      ASSERT_TRUE(s_.set_draft(id, random_tokens(pick(1, 5))).ok());
    }
  }

  void step() {
    if (p_.drafts) propose_drafts();
    if (::testing::Test::HasFatalFailure()) return;
    const SchedulerOutput& out = s_.step();
    ++num_steps_;
    for (RequestId id : out.preempted) prefix_hash_.erase(id);  // recompute rebuilds the same values
    const kv::KvManager& kv = s_.kv();
    const int32_t bs = kv.block_size();
    int32_t num_tokens = 0;
    for (const ScheduledSeq& seq : out.seqs) {
      const Request* r = s_.find(seq.id);
      ASSERT_NE(r, nullptr);
      ASSERT_EQ(r->state, RequestState::Running);
      ASSERT_LT(seq.start, seq.end);
      ASSERT_EQ(seq.end, r->num_computed_tokens);
      ASSERT_EQ(seq.want_logits, seq.end >= r->num_tokens());
      ASSERT_EQ(seq.num_draft > 0, seq.end > r->num_tokens());
      ASSERT_TRUE(p_.drafts || seq.num_draft == 0);
      const size_t known = seq.tokens.size() - size_t(seq.num_draft);
      ASSERT_TRUE(std::equal(seq.tokens.begin(), seq.tokens.begin() + ptrdiff_t(known), r->tokens.begin() + seq.start));
      const auto& table = *seq.block_table;
      ASSERT_GE(int32_t(table.size()), (seq.end + bs - 1) / bs);
      // Reads: the KV of every earlier position is this request's own prefix.
      for (int32_t pos = 0; pos < seq.start; ++pos) {
        const size_t slot = size_t(table[size_t(pos / bs)]) * size_t(bs) + size_t(pos % bs);
        ASSERT_EQ(kv_[slot], kv_value(*r, pos)) << "request " << seq.id << " position " << pos;
      }
      num_tokens += seq.end - seq.start;
    }
    ASSERT_EQ(num_tokens, out.num_tokens);
    ASSERT_LE(num_tokens, 16);
    // Writes: only into blocks this sequence alone holds and the cache does not publish.
    for (const ScheduledSeq& seq : out.seqs) {
      const Request& r = *s_.find(seq.id);
      const auto& table = *seq.block_table;
      std::vector<int32_t> with_draft = r.tokens;
      with_draft.insert(with_draft.end(), seq.tokens.end() - seq.num_draft, seq.tokens.end());
      for (int32_t pos = seq.start; pos < seq.end; ++pos) {
        const kv::BlockId b = table[size_t(pos / bs)];
        ASSERT_EQ(kv.pool().ref_count(b), 1) << "write into shared block " << b;
        if (p_.enable_prefix_cache) {
          ASSERT_FALSE(kv.cache().is_cached(b)) << "write into cached block " << b;
        }
        kv_[size_t(b) * size_t(bs) + size_t(pos % bs)] =
            pos < r.num_tokens() ? kv_value(r, pos) : kv_value_with(r, with_draft, pos);
      }
    }
    // Sometimes a request is cancelled while its step is in flight.
    if (!out.seqs.empty() && pick(0, 49) == 0) {
      ASSERT_TRUE(s_.abort(out.seqs[size_t(pick(0, int32_t(out.seqs.size()) - 1))].id).ok());
    }
    std::vector<SeqOutput> outputs;
    for (const ScheduledSeq& seq : out.seqs) {
      if (!seq.want_logits) continue;
      SeqOutput o{.id = seq.id, .token = pick(0, 5)};
      if (seq.num_draft > 0) {  // verification kept a random prefix of the draft
        const auto draft = seq.tokens.subspan(seq.tokens.size() - size_t(seq.num_draft));
        o.accepted.assign(draft.begin(), draft.begin() + pick(0, seq.num_draft));
      }
      if (pick(0, 29) == 0) o.finish = FinishReason::Stop;
      outputs.push_back(o);
    }
    Status st = s_.update(outputs);
    ASSERT_TRUE(st.ok()) << st.error();
    // A running sequence holds exactly the blocks of its computed tokens: rejected drafts' blocks
    // went back.
    for (const auto& [id, step] : arrived_) {
      const Request* r = s_.find(id);
      if (!r || r->state != RequestState::Running) continue;
      ASSERT_EQ(int32_t(s_.kv().seq_blocks(id).size()), s_.kv().blocks_for(r->num_computed_tokens)) << "request " << id;
    }
    if (pick(0, 19) == 0) {  // a stop string found by the caller after detokenizing
      RequestId id = random_active();
      if (id >= 0 && s_.find(id)->state == RequestState::Running) {
        ASSERT_TRUE(s_.finish(id, FinishReason::StopString).ok());
      }
    }
    Status ok = s_.kv().check();
    ASSERT_TRUE(ok.ok()) << ok.error();
    collect();
  }

  void collect() {
    for (const Request& r : s_.take_finished()) {
      ASSERT_EQ(r.state, RequestState::Finished);
      ASSERT_LE(r.num_tokens(), 64);
      if (r.finish_reason == FinishReason::Length && r.options.max_new_tokens > 0) {
        EXPECT_TRUE(r.num_generated() == r.options.max_new_tokens || r.num_tokens() == 64);
      }
      max_lifetime_ = std::max(max_lifetime_, int32_t(num_steps_ - arrived_.at(r.id)));
      prefix_hash_.erase(r.id);
      ++num_done_;
    }
  }

  Params p_;
  std::mt19937 rng_;
  int64_t now_ns_ = 0;
  Scheduler s_;
  std::vector<uint64_t> kv_;  // [num_blocks * block_size] fake KV per slot
  std::vector<std::vector<int32_t>> prefixes_;
  std::unordered_map<RequestId, int64_t> arrived_;  // id -> step count at arrival
  std::unordered_map<RequestId, std::string> salt_of_;
  std::unordered_map<RequestId, std::vector<uint64_t>> prefix_hash_;
  RequestId next_id_ = 1;
  int64_t num_steps_ = 0;
  int32_t num_done_ = 0;
  int32_t max_lifetime_ = 0;
};

// With FCFS, the oldest running sequence is never preempted and computes at least one token per
// step, and at most kMaxActive requests are ahead of any request: each finishes within
// kMaxActive * max_model_len steps (the observed maximum is far lower).
constexpr int32_t kLifetimeBound = Harness::kMaxActive * 64;

}  // namespace

TEST(SchedulerRandom, FcfsWithPrefixCache) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Harness h({.seed = seed});
    h.run();
    ASSERT_FALSE(HasFailure()) << "seed " << seed;
    EXPECT_LE(h.max_lifetime_steps(), kLifetimeBound);
    EXPECT_GT(h.num_preemptions(), 0);  // the pool is small enough to force preemption
    EXPECT_GT(h.num_hit_tokens(), 0);
  }
}

TEST(SchedulerRandom, ChunkCapAndNoPrefixCache) {
  Harness h({.seed = 7, .max_chunk_tokens = 5, .enable_prefix_cache = false});
  h.run();
  EXPECT_LE(h.max_lifetime_steps(), kLifetimeBound);
  EXPECT_EQ(h.num_hit_tokens(), 0);
}

TEST(SchedulerRandom, CollidingHashNeverAliasesKv) {
  // Only 4 distinct hash values: lookups must rely on the stored content.
  Harness h({.seed = 11, .hasher = [](kv::BlockHash parent, std::span<const int32_t> t) {
               return kv::BlockHash((parent + uint64_t(t[0])) % 4);
             }});
  h.run();
  EXPECT_LE(h.max_lifetime_steps(), kLifetimeBound);
  EXPECT_GT(h.num_hit_tokens(), 0);
}

TEST(SchedulerRandom, TpotTargetHoldsPrefillButEverythingDrains) {
  for (int64_t slo_ms : {2, 6, 20}) {
    Harness h({.seed = uint32_t(20 + slo_ms), .tpot_slo_ns = slo_ms * 1'000'000});
    h.run();
    ASSERT_FALSE(HasFailure()) << "target " << slo_ms << " ms";
    EXPECT_LE(h.max_lifetime_steps(), kLifetimeBound + Scheduler::kMaxHeldSteps);
    if (slo_ms == 2) EXPECT_GT(h.num_prefill_held(), 0);  // the target did bite
  }
}

TEST(SchedulerRandom, PrioritiesStillDrain) {
  Harness h({.seed = 5, .priorities = true});
  h.run();
}

TEST(SchedulerRandom, TenantsClassesAndReservedKvStillDrain) {
  for (uint32_t seed : {41u, 42u, 43u}) {
    for (bool reserve : {false, true}) {
      Harness h({.seed = seed, .drafts = seed == 43, .tenants = true, .reserve_kv = reserve});
      h.run();
      ASSERT_FALSE(HasFailure()) << "seed " << seed << (reserve ? " reserve" : "");
      // Batch requests yield to interactive ones but are never starved for good.
      EXPECT_LE(h.max_lifetime_steps(), 2 * kLifetimeBound);
      EXPECT_GT(h.counters().num_yields, 0);
    }
  }
}

TEST(SchedulerRandom, DraftsAreVerifiedAndRolledBack) {
  for (uint32_t seed : {31u, 32u, 33u}) {
    Harness h({.seed = seed, .drafts = true});
    h.run();
    ASSERT_FALSE(HasFailure()) << "seed " << seed;
    EXPECT_LE(h.max_lifetime_steps(), kLifetimeBound);
    EXPECT_GT(h.num_preemptions(), 0);
    EXPECT_GT(h.num_hit_tokens(), 0);
    EXPECT_GT(h.counters().num_draft_tokens, 100);
    EXPECT_GT(h.counters().num_accepted_tokens, 0);
    EXPECT_LT(h.counters().num_accepted_tokens, h.counters().num_draft_tokens);  // some were rolled back
  }
}
