// libFuzzer target: the GGUF parser on arbitrary bytes, then config and weight binding on
// whatever parses. Must never crash, hang or allocate without bound.
#include <cstddef>
#include <cstdint>

#include "format/gguf.h"
#include "model/config.h"
#include "model/weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = kvasir::gguf::parse({data, size});
  if (!file.ok()) return 0;
  auto config = kvasir::config_from_gguf(*file);
  if (!config.ok()) return 0;
  // Binding reads 1-D tensors: only attempt it when they are small enough to be real.
  if (config->n_embd <= 4096 && config->n_layers <= 64) (void)kvasir::bind_weights(*file, *config);
  return 0;
}
