// Runs requests through an EngineCore to the end and collects each one's tokens (the engine and
// CUDA speculation tests compare such runs with and without drafting).
#pragma once
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "engine/engine.h"

namespace kvasir::test_support {

inline std::map<engine::RequestId, std::vector<int32_t>> run_all(engine::EngineCore& c,
                                                                 const std::vector<engine::GenerationParams>& reqs) {
  std::map<engine::RequestId, std::vector<int32_t>> out;
  for (const auto& p : reqs) {
    auto id = c.add_request(p);
    EXPECT_TRUE(id.ok()) << id.error();
  }
  std::vector<engine::Delta> deltas;
  for (int guard = 0; c.has_unfinished() && guard < 1000000; ++guard) {
    deltas.clear();
    auto st = c.step(deltas);
    EXPECT_TRUE(st.ok()) << st.error();
    if (!st.ok()) break;
    for (auto& d : deltas) out[d.id].insert(out[d.id].end(), d.tokens.begin(), d.tokens.end());
  }
  return out;
}

}  // namespace kvasir::test_support
