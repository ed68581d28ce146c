// Unstructured pruning of weight matrices: which weights to zero, as pure functions over F32 rows.
//
// A weight's score is |W| (magnitude) or |W| · ||X_j|| (Wanda: the weight times the L2 norm of its
// input column over calibration tokens, from an importance matrix's mean squared activations).
// Weights are removed lowest score first within a comparison group: each output row (Wanda's
// choice), each matrix, each transformer layer or the whole model, always exactly
// round(sparsity · group size) of them (ties broken by position). N:M keeps the N highest scores of
// every M consecutive weights of a row (2:4: the pattern sparse tensor cores run).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvasir::compress {

enum class PruneMethod { magnitude, wanda };
enum class PruneScope { row, matrix, layer, global };

// scores[o][j] = |w[o][j]|, or |w[o][j]| * sqrt(col_mean_sq[j]) when col_mean_sq is given.
void weight_scores(std::span<const float> w, int64_t n_in, std::span<const float> col_mean_sq, std::span<float> scores);

// Zeroes the k lowest-scoring weights (ties: the earlier position first). Returns k.
int64_t zero_lowest(std::span<float> w, std::span<const float> scores, int64_t k);

// Zeroes round(sparsity · n_in) weights of every row by score. Returns the weights zeroed.
int64_t zero_lowest_per_row(std::span<float> w, std::span<const float> scores, int64_t n_in, double sparsity);

// Keeps the n highest-scoring weights of every m consecutive ones (rows hold whole groups).
// Returns the weights zeroed.
int64_t zero_n_of_m(std::span<float> w, std::span<const float> scores, int n, int m);

// Whether every m consecutive weights of each row hold at most n nonzeros.
bool has_n_of_m(std::span<const float> w, int64_t n_in, int n, int m);

// A threshold over scores spread across several matrices (scope layer / global): the k-th lowest
// score, and how many weights scoring exactly that are still to go once those below it are gone
// (taken in the order the matrices are then visited, each from its first position).
struct Threshold {
  float value = 0;
  int64_t ties_to_zero = 0;
};
Threshold lowest_k_threshold(std::vector<float> scores, int64_t k);

// Zeroes the weights scoring below t.value and, while t.ties_to_zero lasts, those equal to it
// (decrementing it). Returns the weights zeroed.
int64_t zero_below(std::span<float> w, std::span<const float> scores, Threshold& t);

int64_t count_zeros(std::span<const float> w);

}  // namespace kvasir::compress
