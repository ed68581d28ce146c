// The logits processor chain: each processor's edit, the order of the chain, and how a constraint
// before min_tokens tells it that ending is allowed (or the only thing allowed).
#include "sample/logits_processor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kvasir {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A stand-in for a grammar: allows only `allowed` (and ending when `complete`), and says so.
class OnlyThese final : public LogitsProcessor {
 public:
  OnlyThese(std::vector<int32_t> allowed, bool complete) : allowed_(std::move(allowed)), complete_(complete) {}
  bool apply(std::span<float> row, RowContext& ctx) override {
    for (size_t i = 0; i < row.size(); ++i)
      if (std::find(allowed_.begin(), allowed_.end(), int32_t(i)) == allowed_.end()) row[i] = kNegInf;
    ctx.may_end = complete_;
    ctx.only_end = allowed_.size() == 1 && allowed_[0] == 0;
    return !allowed_.empty();
  }

 private:
  std::vector<int32_t> allowed_;
  bool complete_;
};

TEST(LogitsProcessor, BiasAddsToTheNamedTokens) {
  std::vector<float> row = {1, 2, 3, 4};
  LogitBias bias({{1, 5.f}, {3, -100.f}});
  RowContext ctx;
  ASSERT_TRUE(bias.apply(row, ctx));
  EXPECT_EQ(row, (std::vector<float>{1, 7, 3, -96}));
}

TEST(LogitsProcessor, MinTokensMasksStopsUntilEnoughWereGenerated) {
  MinTokens min(2, {0, 2});  // token 0: end of generation; 2: the request's stop token
  RowContext early{.n_generated = 1}, late{.n_generated = 2};
  EXPECT_TRUE(min.active(early));
  EXPECT_FALSE(min.active(late));
  std::vector<float> row = {1, 2, 3, 4};
  ASSERT_TRUE(min.apply(row, early));
  EXPECT_EQ(row[0], kNegInf);
  EXPECT_EQ(row[2], kNegInf);
  EXPECT_EQ(row[1], 2.f);
  EXPECT_EQ(row[3], 4.f);
}

TEST(LogitsProcessor, AChainOnlyTouchesRowsAProcessorWants) {
  ProcessorChain chain;
  EXPECT_TRUE(chain.empty());
  chain.add(std::make_unique<MinTokens>(1, std::vector<int32_t>{0}));
  EXPECT_TRUE(chain.active({.n_generated = 0}));
  EXPECT_FALSE(chain.active({.n_generated = 1}));  // past min_tokens: the row is sampled in place
}

TEST(LogitsProcessor, ACompleteDocumentMayEndBeforeMinTokens) {
  // Grammar first, min_tokens after it: a complete document lets the end token through.
  ProcessorChain chain;
  chain.add(std::make_unique<OnlyThese>(std::vector<int32_t>{0, 1}, /*complete=*/true));
  chain.add(std::make_unique<MinTokens>(8, std::vector<int32_t>{0}));
  std::vector<float> row = {1, 2, 3};
  RowContext ctx{.n_generated = 0};
  ASSERT_TRUE(chain.apply(row, ctx));
  EXPECT_EQ(row, (std::vector<float>{1, 2, kNegInf}));
}

TEST(LogitsProcessor, OnlyEndingAllowedTooEarlyLeavesNothing) {
  // The grammar allows only the end token, the document is not complete, min_tokens forbids
  // ending: nothing may be sampled, and the chain says so.
  ProcessorChain chain;
  chain.add(std::make_unique<OnlyThese>(std::vector<int32_t>{0}, /*complete=*/false));
  chain.add(std::make_unique<MinTokens>(8, std::vector<int32_t>{0}));
  std::vector<float> row = {1, 2, 3};
  RowContext ctx{.n_generated = 0};
  EXPECT_FALSE(chain.apply(row, ctx));
  EXPECT_EQ(row[0], kNegInf);
}

TEST(LogitsProcessor, TheChainRunsInOrder) {
  // A bias after a mask cannot revive a masked token; before it, the mask still wins.
  for (bool bias_first : {true, false}) {
    ProcessorChain chain;
    auto bias = std::make_unique<LogitBias>(std::vector<std::pair<int32_t, float>>{{2, 50.f}});
    auto mask = std::make_unique<OnlyThese>(std::vector<int32_t>{0, 1}, false);
    if (bias_first) {
      chain.add(std::move(bias));
      chain.add(std::move(mask));
    } else {
      chain.add(std::move(mask));
      chain.add(std::move(bias));
    }
    std::vector<float> row = {1, 2, 3};
    RowContext ctx;
    ASSERT_TRUE(chain.apply(row, ctx));
    EXPECT_EQ(row[2], kNegInf) << bias_first;  // -inf + 50 is still -inf
  }
}

}  // namespace
}  // namespace kvasir
