// libFuzzer target: importance-matrix files (llama.cpp's GGUF form and its older binary form) on
// arbitrary bytes. Must never crash, hang or allocate without bound.
#include <cstddef>
#include <cstdint>

#include "calib/imatrix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = kvasir::calib::parse_imatrix({data, size});
  if (!m.ok()) return 0;
  for (const auto& [name, e] : m->entries)
    if (!e.counts.empty()) (void)e.mean(int64_t(e.counts.size()) - 1, e.n_in() - 1);
  return 0;
}
