#include "grammar/token_index.h"

#include <algorithm>

#include "grammar/utf8_decode.h"

namespace kvasir::grammar {

Trie Trie::build(std::vector<std::pair<std::string_view, int32_t>> entries) {
  std::erase_if(entries, [](const auto& e) { return e.first.empty(); });
  std::sort(entries.begin(), entries.end());
  Trie t;
  t.nodes.push_back({});
  std::vector<uint32_t> path{0};  // node at each depth of the current string
  std::string_view prev;
  for (const auto& [s, id] : entries) {
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    while (path.size() > common + 1) {  // close the nodes below the common prefix
      t.nodes[path.back()].end = uint32_t(t.nodes.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(uint32_t(t.nodes.size()));
      t.nodes.push_back({0, uint32_t(t.tokens.size()), uint32_t(d + 1), uint8_t(s[d])});
    }
    t.max_depth = std::max(t.max_depth, uint32_t(s.size()));
    t.tokens.push_back(id);
    prev = s;
  }
  while (!path.empty()) {
    t.nodes[path.back()].end = uint32_t(t.nodes.size());
    path.pop_back();
  }
  return t;
}

TokenIndex::TokenIndex(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  std::vector<std::pair<std::string_view, int32_t>> entries;
  entries.reserve(bytes_.size());
  for (size_t i = 0; i < bytes_.size(); ++i) entries.push_back({bytes_[i], int32_t(i)});
  trie_ = Trie::build(std::move(entries));
}

bool TokenIndex::worth_a_table(const CharSet& set) {
  int printable = 0;
  for (uint32_t c = 0x20; c < 0x7F; ++c) printable += set.contains(c);
  return printable >= 62;
}

std::shared_ptr<const StarTable> TokenIndex::star_table(const CharSet& set) const {
  if (!worth_a_table(set)) return nullptr;
  std::lock_guard lock(mutex_);
  if (auto it = stars_.find(set.ranges); it != stars_.end()) return it->second;
  if (stars_.size() >= kMaxStarTables) return nullptr;
  auto& slot = stars_[set.ranges];
  auto table = std::make_shared<StarTable>();
  table->inside.assign(words(), 0);
  table->leading.assign(words(), 0);
  std::vector<std::pair<std::string_view, int32_t>> rest;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    const std::string_view b = bytes_[id];
    if (b.empty()) continue;
    // The longest run of whole characters from `set`, then whether the token ends inside one that
    // can still be in `set`.
    size_t run = 0;
    bool inside = false;
    while (true) {
      if (run == b.size()) {
        inside = true;
        break;
      }
      uint32_t cp = 0;
      const size_t n = decode_utf8(b.substr(run), cp);
      if (n > 0) {
        if (!set.contains(cp)) break;
        run += n;
        continue;
      }
      Utf8Partial p;  // an incomplete tail?
      size_t i = run;
      while (i < b.size() && p.step(uint8_t(b[i])) && p.in_progress()) ++i;
      inside = i == b.size() && p.in_progress() && p.lo() <= p.hi() && set.intersects(p.lo(), p.hi());
      break;
    }
    if (inside || run > 0) table->leading[id / 64] |= uint64_t(1) << (id % 64);
    if (inside) table->inside[id / 64] |= uint64_t(1) << (id % 64);
    else rest.push_back({b.substr(run), int32_t(id)});
  }
  table->rest = Trie::build(std::move(rest));
  slot = table;
  return slot;
}

}  // namespace kvasir::grammar
