// The scheduler's step-time model: a step with n decodes, D draft rows and P prefill tokens takes
// about plain_time(n) + draft_rows_time(n, D) + P * prefill_token_ns. Fitted to the scheduler's
// own steps (from one step() to the next while sequences run: forward, sampling and the engine's
// work in between), with decayed sums that follow the machine's speed as it changes.
#pragma once
#include <cstdint>
#include <vector>

namespace kvasir::sched {

class StepCostModel {
 public:
  // Decode-only step time for n decodes: measured, else scaled linearly from the largest smaller
  // count measured (an upper bound: weight reads are shared), else the smallest larger one;
  // -1 before any decode-only step.
  double decode_time(int32_t n) const;
  double prefill_token_ns() const { return prefill_token_ns_; }
  // The cost of one draft row (a verify row wanting logits) on top of a decode step, averaged over
  // all steps with drafts and no prefill; 0 before any.
  double draft_row_ns() const { return draft_row_ns_; }
  // A plain step of n decodes, from the fit of step time over draft rows at n decodes (RowsFit:
  // refitted on every step), else decode_time(n). While a controller drafts, plain steps are rare
  // (every 64th) and their moving average lags the machine's speed by seconds.
  double plain_time(int32_t n) const;
  // What `rows` draft rows add to a step of n decodes: the fit at that count less plain_time(n)
  // (verify forwards are not linear in their rows everywhere: the output head's row tiles change
  // cost at some counts); without a fit at n, draft_row_ns() a row.
  double draft_rows_time(int32_t n, int32_t rows) const;
  bool has_prefill() const { return excess_tokens_ > 0; }
  void observe(int64_t duration_ns, int32_t num_decodes, int32_t num_prefill_tokens, int32_t num_draft_rows = 0);

 private:
  // Step time over draft rows at one decode count, by decayed least squares over its steps without
  // prefill (plain ones included): intercept and slope move together with the machine's speed, so
  // that a row's cost in plain steps holds through a slow stretch, where the excess over a plain
  // step measured seconds ago charged rows the slowdown. A step more than twice off the line
  // counts as twice off (another process took the cores for a while).
  struct RowsLine {
    double w = 0, sx = 0, sxx = 0, sy = 0, sxy = 0;
    void observe(double rows, double ns);
    bool fitted() const;  // rows varied among the steps it holds
    double intercept() const;
    double slope() const;
    double at(double rows) const { return intercept() + slope() * rows; }
  };
  // A count's departure from the line: the ratio of its steps' times to the line's, shrunk to 1.
  // Plain steps (count 0) have one too: with an output head that costs more from some count on,
  // the line's intercept falls below the plain step, and every row's excess would be overpriced.
  struct Departure {
    double ratio = 0, w = 0;
    void observe(double r);
    double value() const;
  };
  struct RowsFit {  // one decode count's
    RowsLine line;
    std::vector<Departure> departures;  // [draft rows]
    double recent_ratio = 0, recent_w = 0;  // decayed sums of every step's ratio to at()
    void observe(int32_t rows, double ns);
    double departure(int32_t rows) const;
    double at(int32_t rows) const { return line.at(rows) * departure(rows); }
  };
  const RowsFit* fit(int32_t n) const;  // null where rows have not varied at n decodes

  std::vector<double> decode_ns_;  // [n decodes], 0: not measured
  double prefill_token_ns_ = 0;
  double excess_ns_ = 0, excess_tokens_ = 0;  // decayed sums behind prefill_token_ns_
  double draft_row_ns_ = 0, draft_excess_ns_ = 0, draft_excess_rows_ = 0;
  std::vector<RowsFit> fits_;  // [n decodes]
};

}  // namespace kvasir::sched
