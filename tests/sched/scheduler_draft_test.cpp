// The multi-token step contract, exactly: a decoding request with a draft is scheduled as its last
// token plus the draft (every row wanting logits), within the budget, the free blocks, the context
// and max_new_tokens; update() appends the accepted prefix and one more token and returns the
// rejected positions' blocks; the prefix cache sees verified tokens only.
#include <gtest/gtest.h>

#include <algorithm>

#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace kvasir::sched {
namespace {

using test::make_sched;
using test::range;

SchedulerConfig config(int32_t blocks = 16, int32_t budget = 64) {
  return {.max_batch_tokens = budget, .max_seqs = std::min(4, budget), .block_size = 4, .num_blocks = blocks, .max_model_len = 64,
          .model_id = "m"};
}

// Prefill of `prompt` and one sampled token: the request is then decoding.
void prefill(Scheduler& s, RequestId id, std::vector<int32_t> prompt, int32_t max_new = 0) {
  ASSERT_TRUE(s.add_request(id, std::move(prompt), {.max_new_tokens = max_new}).ok());
  const SchedulerOutput& out = s.step();
  ASSERT_EQ(out.seqs.size(), 1u);
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = id, .token = 100}}).ok());
}

TEST(SchedulerDraft, VerifyRowsAcceptAndRollBack) {
  Scheduler s = make_sched(config());
  prefill(s, 1, range(0, 5));  // tokens: 0..4, 100; KV for 5 positions (2 blocks)
  ASSERT_TRUE(s.set_draft(1, std::vector<int32_t>{7, 8, 9}).ok());
  const SchedulerOutput& out = s.step();
  ASSERT_EQ(out.seqs.size(), 1u);
  const ScheduledSeq& q = out.seqs[0];
  EXPECT_EQ(q.start, 5);
  EXPECT_EQ(q.end, 9);
  EXPECT_EQ(q.num_draft, 3);
  EXPECT_TRUE(q.want_logits);
  EXPECT_EQ(std::vector<int32_t>(q.tokens.begin(), q.tokens.end()), (std::vector<int32_t>{100, 7, 8, 9}));
  EXPECT_EQ(out.num_tokens, 4);
  EXPECT_EQ(s.kv().seq_blocks(1).size(), 3u);  // positions 0..8
  // Accept 7, reject 8 (and 9): the correction token is 50.
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 50, .accepted = {7}}}).ok());
  const Request* r = s.find(1);
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 100, 7, 50}));
  EXPECT_EQ(r->num_computed_tokens, 7);
  EXPECT_EQ(s.kv().seq_blocks(1).size(), 2u);  // the third block went back
  EXPECT_EQ(s.kv().num_free_blocks(), 14);
  EXPECT_EQ(s.counters().num_draft_tokens, 3);
  EXPECT_EQ(s.counters().num_accepted_tokens, 1);
  // The next step decodes the correction token at position 7, no draft.
  const SchedulerOutput& next = s.step();
  ASSERT_EQ(next.seqs.size(), 1u);
  EXPECT_EQ(next.seqs[0].start, 7);
  EXPECT_EQ(next.seqs[0].end, 8);
  EXPECT_EQ(next.seqs[0].num_draft, 0);
}

TEST(SchedulerDraft, DraftShrinksToBudgetBlocksContextAndMaxTokens) {
  {  // max_new_tokens 4, one generated: at most 2 drafts (+1 verified token = 4)
    Scheduler s = make_sched(config());
    prefill(s, 1, range(0, 5), 4);
    ASSERT_TRUE(s.set_draft(1, range(20, 6)).ok());
    EXPECT_EQ(s.step().seqs[0].num_draft, 2);
  }
  {  // a budget of 3 tokens: 2 drafts
    Scheduler s = make_sched(config(16, 3));
    prefill(s, 1, range(0, 3));
    ASSERT_TRUE(s.set_draft(1, range(20, 6)).ok());
    EXPECT_EQ(s.step().seqs[0].num_draft, 2);
  }
  {  // free blocks: 6 in all, B holds 2, A 3 (KV of positions 0..8) and can grow into the last one:
     // slots up to position 15, the last token at 9 and 6 drafts
    SchedulerConfig c = config(6);
    c.max_model_len = 24;
    Scheduler s = make_sched(c);
    ASSERT_TRUE(s.add_request(1, range(0, 9)).ok());
    ASSERT_TRUE(s.add_request(2, range(50, 5)).ok());
    ASSERT_EQ(s.step().seqs.size(), 2u);
    ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 100}, {.id = 2, .token = 100}}).ok());
    ASSERT_TRUE(s.set_draft(1, range(20, 10)).ok());
    const SchedulerOutput& out = s.step();
    ASSERT_EQ(out.seqs.size(), 2u);
    EXPECT_EQ(out.seqs[0].num_draft, 6);
    EXPECT_TRUE(out.preempted.empty());  // a draft never preempts
  }
  {  // the context: max_model_len 64, 60 tokens known: 3 drafts at most
    Scheduler s = make_sched(config());
    prefill(s, 1, range(0, 59));
    ASSERT_TRUE(s.set_draft(1, range(20, 8)).ok());
    EXPECT_EQ(s.step().seqs[0].num_draft, 3);
  }
}

TEST(SchedulerDraft, OnlyVerifiedTokensReachThePrefixCache) {
  Scheduler s = make_sched(config());
  prefill(s, 1, range(0, 3));  // tokens 0,1,2,100
  ASSERT_TRUE(s.set_draft(1, std::vector<int32_t>{5, 6, 7, 8}).ok());
  s.step();  // rows at positions 3..7: blocks [0..3] and [4..7] full of KV
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 9, .accepted = {}}}).ok());  // all rejected
  // Only the first block (0,1,2,100) holds verified tokens.
  EXPECT_EQ(s.kv().cache().num_cached(), 1);
  // A request whose prompt is the rejected continuation finds the first block only.
  const kv::PrefixHit hit = s.kv().find_prefix(std::vector<int32_t>{0, 1, 2, 100, 5, 6, 7, 8, 1}, "");
  EXPECT_EQ(hit.num_tokens, 4);
}

TEST(SchedulerDraft, AcceptedMustBeAPrefixOfTheDraft) {
  Scheduler s = make_sched(config());
  prefill(s, 1, range(0, 5));
  ASSERT_TRUE(s.set_draft(1, std::vector<int32_t>{7, 8}).ok());
  s.step();
  EXPECT_FALSE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 3, .accepted = {8}}}).ok());
  EXPECT_FALSE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 3, .accepted = {7, 8, 9}}}).ok());
  EXPECT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 3, .accepted = {7, 8}}}).ok());
  EXPECT_EQ(s.find(1)->num_tokens(), 9);
  EXPECT_FALSE(s.set_draft(42, std::vector<int32_t>{1}).ok());
}

// A drafter that writes the step's own blocks fills the rows after step(): the tokens replace the
// placeholders, and a shorter draft drops the rows beyond it (their blocks and counts with them).
TEST(SchedulerDraft, FillDraftReplacesAndShrinksTheScheduledRows) {
  Scheduler s = make_sched(config());
  prefill(s, 1, range(0, 5));  // tokens 0..4, 100: KV for 5 positions (2 blocks)
  EXPECT_FALSE(s.fill_draft(1, std::vector<int32_t>{1}).ok());  // no step is waiting
  ASSERT_TRUE(s.set_draft(1, std::vector<int32_t>{0, 0, 0, 0, 0}).ok());
  const SchedulerOutput& out = s.step();
  ASSERT_EQ(out.seqs[0].num_draft, 5);
  EXPECT_EQ(s.kv().seq_blocks(1).size(), 3u);  // positions 0..10
  EXPECT_FALSE(s.fill_draft(1, range(20, 6)).ok());  // more tokens than rows
  EXPECT_FALSE(s.fill_draft(7, range(20, 1)).ok());  // not scheduled
  ASSERT_TRUE(s.fill_draft(1, std::vector<int32_t>{7, 8}).ok());
  const ScheduledSeq& q = out.seqs[0];
  EXPECT_EQ(q.num_draft, 2);
  EXPECT_EQ(q.end, 8);
  EXPECT_EQ(out.num_tokens, 3);
  EXPECT_EQ(std::vector<int32_t>(q.tokens.begin(), q.tokens.end()), (std::vector<int32_t>{100, 7, 8}));
  EXPECT_EQ(s.kv().seq_blocks(1).size(), 2u);  // positions 0..7: the third block went back
  EXPECT_EQ(s.counters().num_draft_tokens, 2);
  EXPECT_EQ(s.counters().draft_tokens_at[2], 0);
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 50, .accepted = {7, 8}}}).ok());
  EXPECT_EQ(s.find(1)->tokens, (std::vector<int32_t>{0, 1, 2, 3, 4, 100, 7, 8, 50}));
  EXPECT_EQ(s.find(1)->num_computed_tokens, 8);
  // An empty draft leaves a plain decode row.
  ASSERT_TRUE(s.set_draft(1, std::vector<int32_t>{0, 0}).ok());
  ASSERT_EQ(s.step().seqs[0].num_draft, 2);
  ASSERT_TRUE(s.fill_draft(1, {}).ok());
  EXPECT_EQ(s.step().seqs[0].end, 9);  // the same step until update()
  EXPECT_EQ(s.counters().num_drafts, 1);
  ASSERT_TRUE(s.update(std::vector<SeqOutput>{{.id = 1, .token = 51}}).ok());
  EXPECT_EQ(s.find(1)->num_computed_tokens, 9);
  EXPECT_EQ(s.kv().seq_blocks(1).size(), 3u);  // positions 0..8
}

}  // namespace
}  // namespace kvasir::sched
