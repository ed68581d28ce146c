#include "loadgen/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

namespace kvasir::loadgen {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

std::string text(double x, double y, const std::string& s, const char* extra = "") {
  return "<text x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", y) + "\" " + extra + ">" + escape(s) + "</text>\n";
}

// Light yellow (low) to dark red (high).
std::string heat_color(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const int r = int(255 - 80 * t), g = int(240 - 200 * t), b = int(200 - 170 * t);
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
  return buf;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string bucket_name(int64_t upper) {
  return upper <= 2 ? std::to_string(upper) : std::to_string(upper / 2 + 1) + "-" + std::to_string(upper);
}

std::string value_text(double v) { return v >= 100 ? fmt("%.0f", v) : v >= 10 ? fmt("%.1f", v) : fmt("%.2f", v); }

// A round tick step (1, 2 or 5 times a power of ten) giving about five ticks up to `max`.
double nice_step(double max) {
  const double raw = max / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string tick_text(double v) { return v == std::floor(v) ? fmt("%.0f", v) : fmt("%g", v); }

}  // namespace

int64_t pow2_bucket(int64_t n) {
  int64_t b = 1;
  while (b < n && b < (int64_t(1) << 62)) b <<= 1;
  return b;
}

std::string heatmap_svg(const std::string& title, const std::string& unit, std::span<const HeatSample> samples) {
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> cells;
  std::vector<int64_t> xs, ys;
  for (const HeatSample& s : samples) {
    const int64_t x = pow2_bucket(s.input_len), y = pow2_bucket(s.output_len);
    cells[{x, y}].push_back(s.value);
    xs.push_back(x);
    ys.push_back(y);
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  std::sort(ys.begin(), ys.end());
  ys.erase(std::unique(ys.begin(), ys.end()), ys.end());
  double lo = INFINITY, hi = -INFINITY;
  std::map<std::pair<int64_t, int64_t>, double> med;
  for (auto& [k, v] : cells) {
    med[k] = median(v);
    lo = std::min(lo, med[k]);
    hi = std::max(hi, med[k]);
  }
  const double cw = 90, ch = 44, left = 110, top = 60;
  // Wide enough for the title and the legend line too.
  const double width = std::max(left + cw * double(std::max<size_t>(xs.size(), 1)) + 30, 7.5 * double(title.size()) + left + 20);
  const double height = top + ch * double(std::max<size_t>(ys.size(), 1)) + 70;
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", width) + "\" height=\"" +
                    fmt("%.0f", height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += text(left, 24, title, "font-size=\"15\" font-weight=\"bold\"");
  svg += text(left, 42, "median " + unit + " per cell (n = requests); color from " + value_text(lo) + " to " +
                            value_text(hi), "fill=\"#555\"");
  if (cells.empty()) svg += text(left, top + 20, "no successful requests");
  for (size_t yi = 0; yi < ys.size(); ++yi) {
    // Output length grows upward.
    const double y = top + ch * double(ys.size() - 1 - yi);
    svg += text(left - 8, y + ch / 2 + 4, bucket_name(ys[yi]), "text-anchor=\"end\"");
    for (size_t xi = 0; xi < xs.size(); ++xi) {
      const double x = left + cw * double(xi);
      auto it = med.find({xs[xi], ys[yi]});
      if (it == med.end()) {
        svg += "<rect x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", y) + "\" width=\"" + fmt("%.0f", cw) +
               "\" height=\"" + fmt("%.0f", ch) + "\" fill=\"#f3f3f3\" stroke=\"white\"/>\n";
        continue;
      }
      const double t = hi > lo ? (it->second - lo) / (hi - lo) : 0.5;
      svg += "<rect x=\"" + fmt("%.1f", x) + "\" y=\"" + fmt("%.1f", y) + "\" width=\"" + fmt("%.0f", cw) +
             "\" height=\"" + fmt("%.0f", ch) + "\" fill=\"" + heat_color(t) + "\" stroke=\"white\"/>\n";
      const char* ink = t > 0.6 ? "fill=\"white\" text-anchor=\"middle\"" : "text-anchor=\"middle\"";
      svg += text(x + cw / 2, y + ch / 2, value_text(it->second), ink);
      svg += text(x + cw / 2, y + ch / 2 + 14, "n=" + std::to_string(cells[it->first].size()),
                  t > 0.6 ? "fill=\"white\" font-size=\"10\" text-anchor=\"middle\"" : "fill=\"#666\" font-size=\"10\" text-anchor=\"middle\"");
    }
  }
  for (size_t xi = 0; xi < xs.size(); ++xi)
    svg += text(left + cw * double(xi) + cw / 2, top + ch * double(ys.size()) + 16, bucket_name(xs[xi]),
                "text-anchor=\"middle\"");
  svg += text(left + cw * double(xs.size()) / 2, top + ch * double(ys.size()) + 40, "input length (tokens)",
              "text-anchor=\"middle\"");
  svg += text(18, top + ch * double(ys.size()) / 2, "output length (tokens)",
              ("text-anchor=\"middle\" transform=\"rotate(-90 18 " + fmt("%.1f", top + ch * double(ys.size()) / 2) + ")\"").c_str());
  svg += "</svg>\n";
  return svg;
}

int find_knee(std::span<const CurvePoint> points) {
  if (points.size() < 3) return -1;
  std::vector<size_t> order(points.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return points[a].throughput < points[b].throughput; });
  double x0 = points[order.front()].throughput, x1 = points[order.back()].throughput;
  double y0 = INFINITY, y1 = -INFINITY;
  for (const auto& p : points) {
    y0 = std::min(y0, p.latency);
    y1 = std::max(y1, p.latency);
  }
  if (x1 <= x0 || y1 <= y0) return -1;
  // Normalized, the curve rises from (0, ~0) to (1, ~1); the knee is where x - y is largest:
  // most throughput for the least latency before the rise.
  int best = -1;
  double best_d = -INFINITY;
  for (size_t i : order) {
    const double x = (points[i].throughput - x0) / (x1 - x0), y = (points[i].latency - y0) / (y1 - y0);
    if (x - y > best_d) {
      best_d = x - y;
      best = int(i);
    }
  }
  return best;
}

std::string curve_svg(const std::string& title, const std::string& x_label, const std::string& y_label,
                      std::span<const CurvePoint> points, int knee) {
  const double W = 640, H = 420, left = 80, right = 30, top = 50, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  double xmax = 0, ymax = 0;
  for (const auto& p : points) {
    xmax = std::max(xmax, p.throughput);
    ymax = std::max(ymax, p.latency);
  }
  const double xstep = nice_step(xmax > 0 ? xmax * 1.05 : 1), ystep = nice_step(ymax > 0 ? ymax * 1.05 : 1);
  xmax = xstep * std::ceil((xmax > 0 ? xmax * 1.05 : 1) / xstep);
  ymax = ystep * std::ceil((ymax > 0 ? ymax * 1.05 : 1) / ystep);
  auto X = [&](double v) { return left + pw * v / xmax; };
  auto Y = [&](double v) { return top + ph - ph * v / ymax; };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", W) + "\" height=\"" +
                    fmt("%.0f", H) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += text(left, 26, title, "font-size=\"15\" font-weight=\"bold\"");
  // Axes with round ticks.
  svg += "<path d=\"M" + fmt("%.1f", left) + " " + fmt("%.1f", top) + " V" + fmt("%.1f", top + ph) + " H" +
         fmt("%.1f", left + pw) + "\" stroke=\"black\" fill=\"none\"/>\n";
  for (double xv = 0; xv <= xmax * (1 + 1e-9); xv += xstep) {
    svg += "<line x1=\"" + fmt("%.1f", X(xv)) + "\" y1=\"" + fmt("%.1f", top) + "\" x2=\"" + fmt("%.1f", X(xv)) +
           "\" y2=\"" + fmt("%.1f", top + ph) + "\" stroke=\"#eee\"/>\n";
    svg += text(X(xv), top + ph + 16, tick_text(xv), "text-anchor=\"middle\"");
  }
  for (double yv = 0; yv <= ymax * (1 + 1e-9); yv += ystep) {
    svg += "<line x1=\"" + fmt("%.1f", left) + "\" y1=\"" + fmt("%.1f", Y(yv)) + "\" x2=\"" + fmt("%.1f", left + pw) +
           "\" y2=\"" + fmt("%.1f", Y(yv)) + "\" stroke=\"#eee\"/>\n";
    svg += text(left - 6, Y(yv) + 4, tick_text(yv), "text-anchor=\"end\"");
  }
  svg += text(left + pw / 2, H - 14, x_label, "text-anchor=\"middle\"");
  svg += text(16, top + ph / 2, y_label,
              ("text-anchor=\"middle\" transform=\"rotate(-90 16 " + fmt("%.1f", top + ph / 2) + ")\"").c_str());
  // Joined in sweep order: past saturation the line bends back (more load, less throughput).
  if (!points.empty()) {
    std::string d;
    for (size_t k = 0; k < points.size(); ++k)
      d += (k ? " L" : "M") + fmt("%.1f", X(points[k].throughput)) + " " + fmt("%.1f", Y(points[k].latency));
    svg += "<path d=\"" + d + "\" stroke=\"#2060c0\" stroke-width=\"2\" fill=\"none\"/>\n";
  }
  for (size_t i = 0; i < points.size(); ++i) {
    const bool is_knee = int(i) == knee;
    svg += "<circle cx=\"" + fmt("%.1f", X(points[i].throughput)) + "\" cy=\"" + fmt("%.1f", Y(points[i].latency)) +
           "\" r=\"" + (is_knee ? "7" : "4") + "\" fill=\"" + (is_knee ? "#d02020" : "#2060c0") + "\"/>\n";
    svg += text(X(points[i].throughput) + 8, Y(points[i].latency) - 8, points[i].label + (is_knee ? " (knee)" : ""),
                is_knee ? "fill=\"#d02020\" font-weight=\"bold\"" : "fill=\"#333\"");
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace kvasir::loadgen
