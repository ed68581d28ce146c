// Per-thread scratch buffers (thread_local vectors reused across calls) keep their capacity for
// the life of the thread, so one huge input would pin its peak size in every thread that ever
// saw one. Callers hand such buffers to release_if_large after use: a buffer of normal size
// stays for reuse (the common path never allocates), an oversized one is freed.
#pragma once
#include <cstddef>

namespace kvasir {

// 64 KiB holds the scratch of any ordinary segment (thousands of symbols); only inputs that large
// pay an allocation per call, which is small next to the work they cost anyway.
inline constexpr size_t kScratchKeepBytes = size_t(64) << 10;

// Out of line and cold, so that the check costs the hot caller nothing but a compare.
template <typename Buffer>
[[gnu::noinline, gnu::cold]] void release_buffer(Buffer& buffer) {
  Buffer().swap(buffer);
}

// Works for std::vector and std::string.
template <typename Buffer>
void release_if_large(Buffer& buffer, size_t keep_bytes = kScratchKeepBytes) {
  if (buffer.capacity() * sizeof(typename Buffer::value_type) > keep_bytes) release_buffer(buffer);
}

}  // namespace kvasir
