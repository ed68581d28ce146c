// std::vector whose storage starts on a 64-byte cache line. Threads that write disjoint column
// ranges of the same activation rows then never share a line at a range boundary (ranges are
// multiples of 16 floats): with malloc's 16-byte alignment every boundary line ping-ponged
// between the cores of a matmul pass.
#pragma once
#include <cstddef>
#include <new>
#include <vector>

namespace kvasir {

inline constexpr size_t kCacheLine = 64;

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kCacheLine))); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, std::align_val_t(kCacheLine)); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
};

template <class T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace kvasir
