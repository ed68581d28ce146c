// The speculation controller: how many draft rows each decoding request gets in the next step,
// chosen so that the step's tokens per unit of time are as high as the estimates allow.
//
// Costs are in units of a plain decode step's time. A draft row at position j of a request yields
// one more token with probability g = a_0 ... a_j (a_j: that request's acceptance at position j
// given the ones before were accepted) and costs a verify row in the target's forward. A model
// drafter adds its own forwards: one per draft position, whose time is a fixed part (the draft's
// weights are read once whatever its rows) plus a part per row, and before its first position it
// computes the context it has not seen (a whole prompt the first time). That catch-up is an
// investment in the request's later steps, so it is spread over the steps the request is
// expected to keep drafting for (its tokens left over its expected tokens per step, 1 to 64).
// n-gram drafts cost only their verify rows.
//
// Depth by depth, the requests still drafting are ordered by gain per cost and the prefix that
// gives the best step rate is taken (each row priced at what it adds to the step's verify rows),
// if its extra tokens per extra time beat the step's rate so far by a margin and the step's rate,
// scaled by what drafted steps have realized against their forecasts, still beats a plain step's
// by that margin; otherwise drafting stops at that depth. K = 0 (no rows) where nothing pays.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvasir::spec {

struct DraftCosts {
  double verify_row = 0.1;      // one more row wanting logits in the target's forward
  // verify_rows[D]: a step's D verify rows together, where measured for that many (index 0 is
  // 0); beyond its end, verify_row per row more. Empty: verify_row per row throughout.
  std::vector<double> verify_rows = {};
  double draft_forward = 0;     // a draft forward's fixed part
  double draft_row = 0;         // a draft forward's part per row
  double catch_up_token = 0;    // one context token the draft has not seen
  // What drafted steps actually gained over what their plans forecast (RealizedGain); a row's
  // extra tokens are scaled by it before they must beat the step's rate.
  double realized = 1.0;
};

struct DraftCandidate {
  std::span<const double> accept;  // acceptance per draft position (missing positions: the last one)
  int32_t most = 0;                // rows the proposer can fill
  int32_t catch_up = 0;            // context tokens the draft must compute first (model drafts)
  int32_t left = 1;                // tokens the request may still generate (spreads the catch-up)
  bool probe_due = false;          // in: its estimate is stale; try one row if sure rows would pay
  int32_t k = 0;                   // out: rows chosen
};

inline constexpr double kRowMargin = 1.02;  // no rows that barely pay

// Fills every candidate's k (0..most) for a step with `decodes` decoding requests (candidates
// among them). Then the probes: candidates left without rows whose probe is due get one row each
// if those rows, taken as sure tokens and sharing one draft forward, would pay (a request's
// estimate only moves when it drafts, and at a few decodes one request's row alone never pays
// for a draft forward that several could share).
// Returns the step's forecast: its expected tokens and its time in plain steps (probes counted at
// their estimated acceptance).
struct StepForecast {
  double tokens = 0, time = 1;
};
StepForecast plan_draft_rows(std::span<DraftCandidate> cands, int32_t decodes, const DraftCosts& costs);

// The check on the plan: costs and acceptance are estimates, and a plan that drafts on optimistic
// ones loses while it believes it gains. After each drafted step (without prefill) the engine
// reports the forecast's gain (forecast tokens per time over the plain step's) and the realized
// one (tokens emitted per time taken, draft forwards included, over the plain step's measured
// rate); factor() is their ratio over recent drafted steps (decayed sums, so one noisy step moves
// it little), 1 until a few were seen, within [0.5, 1.25]. Steps without drafts fade the evidence
// (relax), so that a controller that stopped drafting on a bad stretch tries again later.
class RealizedGain {
 public:
  void observe(double forecast_gain, double realized_gain);
  void relax();
  double factor() const;

 private:
  double w_ = 0, forecast_ = 0, realized_ = 0;
};

// Acceptance per draft position: decayed counts of the drafts verified at each position (a position
// is tried only when the ones before it were accepted, so its rate is conditional on them). A
// request plans with its own record shrunk toward the proposer's record over all requests
// (estimate()): a few rejections in a row then move it only part of the way, where a request's
// own moving average alone dropped below paying after two and left it idle until a probe.
class AcceptanceRecord {
 public:
  explicit AcceptanceRecord(double keep) : keep_(keep) {}
  void observe(size_t position, bool accepted);
  // The position was not tried because every draft before it was accepted: its record fades, so
  // its rate drifts toward the position before's, and one early rejection there does not keep K
  // short for good.
  void fade(size_t position, double keep);
  // The rate at the position: its hits and tries with the position before's rate (`prior` before
  // position 0; never below `prior` after it) counted as prior_weight more tries, so that a few
  // tries move it only so far and a position never tried starts from the one before (or the prior).
  double rate(size_t position, double prior, double prior_weight) const;
  // Fills out[0..positions): (own hits + weight * pooled rate) / (own tries + weight) per position,
  // the pooled rate being rate(j, prior, pooled_weight).
  static void estimate(const AcceptanceRecord& own, const AcceptanceRecord& pooled, size_t positions, double prior,
                       double pooled_weight, double weight, std::vector<double>& out);

 private:
  double keep_;
  std::vector<double> hits_, tries_;
};

// How often a scored draft (Proposer::scores_drafts) is accepted given the proposer's probability
// for it: decayed counts per (position 0, 1, later) and tenth of probability, each cell starting
// from the probability itself (a calibrated proposer's acceptance), but no lower than kFloor,
// counted as kPriorWeight drafts. A trained head's first drafts are about calibrated (0.92 kept
// above 0.9), its low probabilities too low (0.15-0.25 kept below 0.2), and a cell whose prior
// says no draft pays would never be tried, so never learn that; its later drafts are less
// calibrated than its first (the state it feeds itself drifts), hence the positions apart.
// The prior weighs as 16 drafts: at 4, a cell's first few rejections dragged it below what its
// drafts were kept (position 1, probability 0.8-0.9: read as 0.62 where 0.76 were kept), the
// controller then declined those drafts, so the cell was never seen again to recover (the fixed
// K = 5 led the controller 1.1-2.2% in every run; with 16, drafted tokens/s 1.023x, 1.006x,
// 1.022x round by round at batch 1, 0.994x at 4 sequences; docs/PERFORMANCE.md, session 36).
class ConfidenceCalibration {
 public:
  void observe(size_t position, double confidence, bool accepted);
  double acceptance(size_t position, double confidence) const;

 private:
  static constexpr int kGroups = 3, kBins = 10;
  static constexpr double kKeep = 0.995, kPriorWeight = 16;  // kKeep: about the last 200 drafts of a cell
  static constexpr double kFloor = 0.3;
  static int bin(double confidence);
  double hits_[kGroups][kBins] = {}, tries_[kGroups][kBins] = {};
};

// What a model drafter's forwards cost, fitted online from its measured forwards: a fixed part
// plus a part per row (decayed least squares; with one row count seen, all fixed), and the cost
// of a catch-up token (the first forward's time beyond a plain forward of its logits rows; a
// first forward with little to catch up counts as a plain one).
class DraftCostModel {
 public:
  void observe_forward(int32_t rows, double ns);
  void observe_first(int32_t logits_rows, int32_t catch_up_tokens, double ns);
  bool measured() const { return w_ > 0; }
  double forward_fixed_ns() const { return fixed_ns_; }
  double per_row_ns() const { return row_ns_; }
  double forward_ns(int32_t rows) const { return fixed_ns_ + row_ns_ * rows; }
  // -1 until a first forward with catch-up was seen.
  double catch_up_token_ns() const { return catch_up_ns_; }

 private:
  double w_ = 0, sx_ = 0, sxx_ = 0, sy_ = 0, sxy_ = 0;  // decayed sums over (rows, ns)
  double fixed_ns_ = 0, row_ns_ = 0, catch_up_ns_ = -1;
};

// The costs relative to a plain decode step of step_ns (> 0): a verify row from verify_row_ns
// (0: not measured yet, a prior), and with a model drafter (draft non-null) its measured forwards
// and catch-up tokens. Until measured, a draft forward is priced hopefully (so that it is tried)
// and a catch-up token as the target's own prefill token (a draft costs no more).
// verify_rows_ns[D]: the measured cost of D verify rows together (0: not measured), relative
// like the rest.
DraftCosts relative_costs(double step_ns, double verify_row_ns, const DraftCostModel* draft, double prefill_token_ns,
                          std::span<const double> verify_rows_ns = {});

}  // namespace kvasir::spec
