// A KV tier's stored block under hostile bytes (a file on a shared disk, a value in a shared
// Redis): decode_block must refuse or parse without reading past the bytes, and what it accepts
// must encode back to the same bytes.
#include <cstdint>
#include <cstring>
#include <vector>

#include "kv/block_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string format = "fuzz-format";
  std::vector<uint8_t> copy(data, data + size);  // exactly the bytes given: ASan sees any overread
  auto b = kvasir::kv::decode_block(copy.data(), copy.size(), format);
  if (b) {
    const auto again = kvasir::kv::encode_block(*b, format);
    if (again != copy) __builtin_trap();
  }
  // The same bytes with a valid checksum: the parse past the checksum is exercised too.
  kvasir::kv::StoredBlock seed{.hash = size, .parent = 1, .salt = {}, .tokens = {}, .payload = copy};
  auto enc = kvasir::kv::encode_block(seed, format);
  auto back = kvasir::kv::decode_block(enc.data(), enc.size(), format);
  if (!back || back->payload != copy) __builtin_trap();
  return 0;
}
