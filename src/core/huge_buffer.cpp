#include "core/huge_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <utility>

namespace kvasir {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kPage = size_t(4) << 10;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif
}  // namespace

HugeBuffer::HugeBuffer(size_t bytes) {
  if (bytes == 0 || bytes > SIZE_MAX - kHugePage) return;
  // Whole huge pages, so that the tail of the buffer is eligible too.
  const size_t mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
#ifdef MADV_HUGEPAGE
  (void)::madvise(p, mapped, MADV_HUGEPAGE);  // a hint: refused means 4 KiB pages, same bytes
#endif
  data_ = static_cast<uint8_t*>(p);
  size_ = bytes;
  mapped_ = mapped;
}

void HugeBuffer::populate() {
  if (!data_) return;
  if (::madvise(data_, mapped_, MADV_POPULATE_WRITE) == 0 || errno != EINVAL) return;  // out of memory: stay lazy
  // Kernels before 5.14: write the zero each page already reads as (nothing uses the buffer yet).
  for (size_t off = 0; off < mapped_; off += kPage) reinterpret_cast<volatile uint8_t*>(data_)[off] = 0;
}

void HugeBuffer::populate_in_background() {
  if (!data_ || filler_.joinable()) return;
  // One huge page first: EINVAL says the kernel cannot populate without writing.
  if (::madvise(data_, std::min(mapped_, kHugePage), MADV_POPULATE_WRITE) != 0 && errno == EINVAL) return populate();
  stop_filling_ = std::make_shared<std::atomic<bool>>(false);
  filler_ = std::thread([data = data_, mapped = mapped_, stop = stop_filling_] {
    constexpr size_t kChunk = size_t(64) << 20;  // a stop request waits for one chunk at most
    for (size_t off = 0; off < mapped && !stop->load(std::memory_order_relaxed); off += kChunk)
      if (::madvise(data + off, std::min(kChunk, mapped - off), MADV_POPULATE_WRITE) != 0) return;  // out of memory: lazy
  });
}

HugeBuffer::~HugeBuffer() { release(); }

HugeBuffer::HugeBuffer(HugeBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      mapped_(std::exchange(o.mapped_, 0)),
      filler_(std::move(o.filler_)),
      stop_filling_(std::move(o.stop_filling_)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
    filler_ = std::move(o.filler_);
    stop_filling_ = std::move(o.stop_filling_);
  }
  return *this;
}

void HugeBuffer::release() {
  if (filler_.joinable()) {
    stop_filling_->store(true);
    filler_.join();
  }
  if (data_) ::munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
}

}  // namespace kvasir
