#include "loadgen/workload.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

namespace kvasir::loadgen {

namespace {

constexpr const char* kWords[] = {
    "the",   "of",    "and",   "to",     "in",    "is",    "was",   "that",  "for",    "on",    "with",  "as",
    "it",    "at",    "by",    "from",   "his",   "her",   "they",  "one",   "time",   "house", "water", "little",
    "girl",  "boy",   "dog",   "cat",    "tree",  "sun",   "happy", "big",   "small",  "day",   "night", "friend",
    "play",  "went",  "saw",   "found",  "said",  "look",  "very",  "park",  "ball",   "bird",  "red",   "blue",
    "green", "sky",   "walk",  "run",    "jump",  "cake",  "mom",   "dad",   "school", "book",  "story", "river",
    "small", "story", "light", "garden", "flower", "rain", "wind",  "cold",  "warm",   "door",  "road",  "city",
    "king",  "queen", "ship",  "sea",    "sand",  "stone", "apple", "bread", "milk",   "song",  "dance", "dream",
};

int64_t parse_int(const std::string& s, bool& ok) {
  size_t used = 0;
  try {
    const long long v = std::stoll(s, &used);
    ok = ok && used == s.size() && v >= 0;
    return v;
  } catch (...) {
    ok = false;
    return 0;
  }
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) parts.push_back(item);
  return parts;
}

std::vector<int32_t> draw_tokens(const std::vector<int32_t>& pool, int64_t n, std::mt19937_64& rng) {
  // Each token independently from the pool: no two prompts share a prefix by accident.
  std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
  std::vector<int32_t> out(size_t(std::max<int64_t>(n, 0)));
  for (auto& t : out) t = pool[pick(rng)];
  return out;
}

std::string draw_words(int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kWords[pick(rng)];
  }
  return out;
}

Result<std::vector<RequestSpec>> read_jsonl(const WorkloadOptions& o, std::mt19937_64& rng) {
  std::ifstream in(o.prompt_file);
  if (!in) return Error{"cannot read " + o.prompt_file};
  std::vector<RequestSpec> lines;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::ordered_json::parse(line, nullptr, false);
    const std::string at = o.prompt_file + ":" + std::to_string(n);
    if (j.is_discarded() || !j.is_object()) return Error{at + ": not a JSON object"};
    RequestSpec r;
    if (j.contains("messages") && j["messages"].is_array()) r.messages = j["messages"];
    else if (j.contains("prompt") && j["prompt"].is_string()) r.prompt_text = j["prompt"];
    else if (j.contains("prompt") && j["prompt"].is_array() && !j["prompt"].empty()) {  // token ids, exact lengths
      for (const auto& t : j["prompt"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          return Error{at + ": \"prompt\" as an array holds token ids"};
        r.prompt_ids.push_back(int32_t(t.get<int64_t>()));
      }
      r.input_len = int64_t(r.prompt_ids.size());
    }
    else if (j.contains("text") && j["text"].is_string()) r.prompt_text = j["text"];
    else return Error{at + ": needs \"prompt\" (a string or token ids) or \"messages\" (array)"};
    for (const char* k : {"output_len", "max_tokens"}) {
      if (j.contains(k) && j[k].is_number_integer() && j[k].get<int64_t>() > 0) r.output_len = j[k].get<int64_t>();
    }
    if (!r.output_len) r.output_len = o.output_len.sample(rng);
    lines.push_back(std::move(r));
  }
  if (lines.empty()) return Error{o.prompt_file + ": no prompts"};
  std::vector<RequestSpec> out;
  for (int64_t i = 0; i < o.num_requests; ++i) out.push_back(lines[size_t(i) % lines.size()]);
  return out;
}

}  // namespace

Result<LengthSpec> LengthSpec::parse(const std::string& text) {
  auto parts = split(text, ':');
  bool ok = true;
  LengthSpec s;
  if (parts.size() == 1) {
    s.lo = s.hi = parse_int(parts[0], ok);
  } else if (parts.size() == 2) {
    s.kind = Kind::uniform;
    s.lo = parse_int(parts[0], ok);
    s.hi = parse_int(parts[1], ok);
  } else if (parts.size() == 3 && parts[0] == "log") {
    s.kind = Kind::log_uniform;
    s.lo = parse_int(parts[1], ok);
    s.hi = parse_int(parts[2], ok);
  } else {
    ok = false;
  }
  if (!ok || s.lo < 1 || s.hi < s.lo)
    return Error{"bad length '" + text + "': use N, LO:HI (uniform) or log:LO:HI (log-uniform), with 1 <= LO <= HI"};
  return s;
}

int64_t LengthSpec::sample(std::mt19937_64& rng) const {
  switch (kind) {
    case Kind::fixed: return lo;
    case Kind::uniform: return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    case Kind::log_uniform: {
      std::uniform_real_distribution<double> u(std::log(double(lo)), std::log(double(hi) + 1));
      return std::clamp<int64_t>(int64_t(std::exp(u(rng))), lo, hi);
    }
  }
  return lo;
}

std::string LengthSpec::to_string() const {
  switch (kind) {
    case Kind::fixed: return std::to_string(lo);
    case Kind::uniform: return std::to_string(lo) + ":" + std::to_string(hi);
    case Kind::log_uniform: return "log:" + std::to_string(lo) + ":" + std::to_string(hi);
  }
  return "";
}

std::string filler_text(size_t words, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return draw_words(int64_t(words), rng);
}

Result<std::vector<RequestSpec>> build_workload(const WorkloadOptions& o, const std::vector<int32_t>& pool) {
  std::mt19937_64 rng(o.seed);
  if (o.dataset == Dataset::jsonl) return read_jsonl(o, rng);
  if (o.dataset == Dataset::conversations) {
    if (pool.empty()) return Error{"conversations need a vocabulary to draw token ids from (--model)"};
    const int64_t turns = std::max<int64_t>(o.turns, 1);
    std::vector<RequestSpec> out;
    for (int64_t c = 0; c < std::max<int64_t>(o.num_requests / turns, 1); ++c) {
      std::vector<int32_t> history = draw_tokens(pool, o.prefix_len, rng);
      for (int64_t t = 0; t < turns; ++t) {
        RequestSpec r;
        auto user = draw_tokens(pool, o.input_len.sample(rng), rng);
        history.insert(history.end(), user.begin(), user.end());
        r.prompt_ids = history;
        r.input_len = int64_t(history.size());
        r.output_len = o.output_len.sample(rng);
        r.conversation = c;
        out.push_back(std::move(r));
        auto answer = draw_tokens(pool, r.output_len, rng);  // stands in for the model's answer
        history.insert(history.end(), answer.begin(), answer.end());
      }
    }
    return out;
  }
  std::vector<std::vector<int32_t>> prefix_ids;
  std::vector<std::string> prefix_words;
  if (o.dataset == Dataset::shared_prefix) {
    for (int64_t i = 0; i < std::max<int64_t>(o.num_prefixes, 1); ++i) {
      if (!pool.empty()) prefix_ids.push_back(draw_tokens(pool, o.prefix_len, rng));
      else prefix_words.push_back(draw_words(o.prefix_len, rng) + " ");
    }
  }
  std::vector<RequestSpec> out;
  for (int64_t i = 0; i < o.num_requests; ++i) {
    RequestSpec r;
    const int64_t n = o.input_len.sample(rng);
    r.output_len = o.output_len.sample(rng);
    const size_t group = size_t(i) % std::max<size_t>(prefix_ids.size() + prefix_words.size(), 1);
    if (!pool.empty()) {
      if (!prefix_ids.empty()) r.prompt_ids = prefix_ids[group];
      auto tail = draw_tokens(pool, n, rng);
      r.prompt_ids.insert(r.prompt_ids.end(), tail.begin(), tail.end());
      r.input_len = int64_t(r.prompt_ids.size());
    } else {
      r.prompt_text = (prefix_words.empty() ? "" : prefix_words[group]) + draw_words(n, rng);
      r.input_len = n + (prefix_words.empty() ? 0 : o.prefix_len);  // about one token a word
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kvasir::loadgen
