// Large, zeroed, page-aligned buffers for memory that is streamed every step (the KV cache
// pools). Backed by an anonymous mapping with transparent huge pages requested (madvise), so
// a pass over hundreds of MiB costs a few hundred TLB entries instead of one per 4 KiB; pages
// come zeroed from the kernel and are committed on first touch. Falls back to plain 4 KiB pages
// where huge pages are unavailable; the contents never differ.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

namespace kvasir {

class HugeBuffer {
 public:
  HugeBuffer() = default;
  // nullptr data() when the memory cannot be mapped.
  explicit HugeBuffer(size_t bytes);
  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& o) noexcept;
  HugeBuffer& operator=(HugeBuffer&& o) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  // Commits every page now (still zero), so that no later access pays a page fault: the
  // first touch of fresh memory is a kernel zeroing pass, and in a VM often a host fault as
  // well (~1 s per GiB seen on the CI machines). Call before the buffer is in use.
  void populate();
  // The same on a thread of its own, so that the owner is usable at once: the kernel commits the
  // pages without changing what they hold, so writes meanwhile are safe (Linux 5.14 and later;
  // on older kernels this is populate(), now). Stopped and joined when the buffer goes.
  void populate_in_background();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void release();
  uint8_t* data_ = nullptr;
  size_t size_ = 0, mapped_ = 0;
  std::thread filler_;
  std::shared_ptr<std::atomic<bool>> stop_filling_;
};

}  // namespace kvasir
