#include "tokenizer/special.h"

#include <algorithm>
#include <map>

namespace kvasir::tok {

namespace {

// C isspace in the "C" locale: the strip attributes use it on bytes.
bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

struct Occurrence {
  int32_t rank;
  size_t begin, len;
  int32_t token;
};

}  // namespace

int32_t SpecialMatcher::child(int32_t node, uint8_t b) const {
  if (node == 0) return root_children_[b];
  for (int32_t c = nodes_[size_t(node)].first_child; c >= 0; c = nodes_[size_t(c)].next_sibling)
    if (nodes_[size_t(c)].byte == b) return c;
  return -1;
}

void SpecialMatcher::build(const Vocab& vocab) {
  vocab_ = &vocab;
  nodes_.assign(1, Node{});
  std::fill(std::begin(root_children_), std::end(root_children_), -1);

  // llama.cpp's cache_special_tokens: ids in ascending order, then std::sort by length,
  // longest first. std::sort is not stable, so equal lengths keep whatever order it leaves;
  // running the same sort on the same input reproduces it.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab.size(); ++id)
    if (vocab.has(id, kAttrControl | kAttrUserDefined | kAttrUnknown)) order.push_back(id);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return vocab.text[size_t(a)].size() > vocab.text[size_t(b)].size();
  });

  order_ = order;
  for (size_t r = 0; r < order.size(); ++r) {
    const std::string& t = vocab.text[size_t(order[r])];
    int32_t node = 0;
    for (char ch : t) {
      const uint8_t b = uint8_t(ch);
      int32_t next = child(node, b);
      if (next < 0) {
        next = int32_t(nodes_.size());
        Node n;
        n.byte = b;
        if (node == 0) {
          root_children_[b] = next;
        } else {
          n.next_sibling = nodes_[size_t(node)].first_child;
          nodes_[size_t(node)].first_child = next;
        }
        nodes_.push_back(n);
      }
      node = next;
    }
    nodes_[size_t(node)].token = order[r];
    nodes_[size_t(node)].rank = int32_t(r);
  }
}

// llama.cpp's algorithm: for each present token in priority order, split every raw fragment
// at its occurrences, left to right.
void SpecialMatcher::scan_tokens(std::string_view text, const std::vector<uint8_t>& present,
                                 std::vector<Fragment>& out) const {
  const Vocab& v = *vocab_;
  std::vector<Fragment> frags{{kNoToken, 0, text.size()}}, next;
  for (size_t rank = 0; rank < present.size(); ++rank) {
    if (!present[rank]) continue;
    const int32_t token = order_[rank];
    const std::string& t = v.text[size_t(token)];
    const uint16_t a = v.attr[size_t(token)];
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token != kNoToken) {
        next.push_back(f);
        continue;
      }
      size_t base = f.begin;
      const std::string_view window = text.substr(0, f.end);
      for (size_t m = window.find(t, base); m != std::string_view::npos; m = window.find(t, base)) {
        size_t left_end = m;
        if (a & kAttrLstrip)
          while (left_end > base && is_ascii_space(text[left_end - 1])) --left_end;
        if (left_end > base) next.push_back({kNoToken, base, left_end});
        next.push_back({token, m, m + t.size()});
        base = m + t.size();
        if (a & kAttrRstrip)
          while (base < f.end && is_ascii_space(text[base])) ++base;
      }
      if (base < f.end) next.push_back({kNoToken, base, f.end});
    }
    frags.swap(next);
  }
  out = std::move(frags);
}

void SpecialMatcher::partition(std::string_view text, bool parse_special, std::vector<Fragment>& out,
                               size_t max_occurrences) const {
  out.clear();
  if (text.empty()) return;
  const Vocab& v = *vocab_;

  std::vector<Occurrence> occ;
  std::vector<uint8_t> present;  // by rank, filled only when the list overflows
  bool overflow = false;
  for (size_t p = 0; p < text.size(); ++p) {
    int32_t node = root_children_[uint8_t(text[p])];
    for (size_t q = p + 1; node >= 0; ++q) {
      const Node& n = nodes_[size_t(node)];
      if (n.token >= 0 && (parse_special || !v.has(n.token, kAttrSpecial))) {
        if (!overflow && occ.size() >= max_occurrences) {
          overflow = true;
          present.assign(order_.size(), 0);
          for (const Occurrence& o : occ) present[size_t(o.rank)] = 1;
          occ = {};
        }
        if (overflow) {
          present[size_t(n.rank)] = 1;
        } else {
          occ.push_back({n.rank, p, q - p, n.token});
        }
      }
      if (q >= text.size()) break;
      node = child(node, uint8_t(text[q]));
    }
  }
  if (overflow) {
    scan_tokens(text, present, out);
    return;
  }
  if (occ.empty()) {
    out.push_back({kNoToken, 0, text.size()});
    return;
  }

  // Accept occurrences in llama.cpp's order: by token priority, then left to right. An
  // occurrence is taken only if it lies inside text that no earlier token claimed.
  std::sort(occ.begin(), occ.end(), [](const Occurrence& a, const Occurrence& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.begin < b.begin;
  });
  struct Claim {
    size_t end;  // the claimed span [begin, end) includes stripped whitespace
    int32_t token;
  };
  std::map<size_t, Claim> claimed;
  const size_t n = text.size();
  for (const Occurrence& o : occ) {
    size_t b = o.begin, e = o.begin + o.len;
    auto next = claimed.lower_bound(b);
    if (next != claimed.end() && next->first < e) continue;
    size_t lo = 0;
    if (next != claimed.begin()) {
      lo = std::prev(next)->second.end;
      if (lo > b) continue;
    }
    const size_t hi = next != claimed.end() ? next->first : n;
    const uint16_t a = v.attr[size_t(o.token)];
    if (a & kAttrLstrip)
      while (b > lo && is_ascii_space(text[b - 1])) --b;
    if (a & kAttrRstrip)
      while (e < hi && is_ascii_space(text[e])) ++e;
    claimed.emplace(b, Claim{e, o.token});
  }

  size_t pos = 0;
  for (const auto& [begin, c] : claimed) {
    if (begin > pos) out.push_back({kNoToken, pos, begin});
    out.push_back({c.token, begin, c.end});
    pos = c.end;
  }
  if (pos < n) out.push_back({kNoToken, pos, n});
}

}  // namespace kvasir::tok
