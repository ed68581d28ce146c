// Streams text through a set of stop strings: text is released as soon as it can no longer be
// the start of a stop string, and generation ends before the first stop string (not shown).
#pragma once
#include <string>
#include <vector>

namespace kvasir::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Appends text; returns what can be shown now. Sets stopped() when a stop string appeared.
  std::string push(const std::string& text);
  // What is still held back (a possible stop-string prefix), released at the end.
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace kvasir::engine
