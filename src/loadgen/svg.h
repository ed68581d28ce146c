// Plain SVG charts, no dependencies: latency heatmaps over (input length, output length) buckets and
// the throughput-versus-tail-latency curve of a sweep with its knee marked.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvasir::loadgen {

// Upper bound of n's power-of-two bucket (1, 2, 4, ...).
int64_t pow2_bucket(int64_t n);

struct HeatSample {
  int64_t input_len = 0, output_len = 0;
  double value = 0;
};

// Median of `value` per (input bucket, output bucket); cells show the median and the count.
std::string heatmap_svg(const std::string& title, const std::string& unit, std::span<const HeatSample> samples);

struct CurvePoint {
  std::string label;  // "c=8"
  double throughput = 0;  // x
  double latency = 0;     // y
};

// The knee (Kneedle on the normalized curve sorted by throughput): the point furthest below the
// chord from the first to the last point, i.e. where latency starts to rise faster than
// throughput. -1 with fewer than three points.
int find_knee(std::span<const CurvePoint> points);

std::string curve_svg(const std::string& title, const std::string& x_label, const std::string& y_label,
                      std::span<const CurvePoint> points, int knee);

}  // namespace kvasir::loadgen
