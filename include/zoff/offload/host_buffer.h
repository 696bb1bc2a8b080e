// An owned, aligned block of host memory: the staging buffers of the NVMe tier and host tiers.
#pragma once

#include <cstddef>
#include <memory>

namespace zoff::offload {

// `bytes` of host memory starting on a multiple of `alignment` (a power of two, >= 64;
// 4096 for O_DIRECT). The capacity is `bytes` rounded up to the alignment, so an I/O of a
// padded tail never runs past the end. Zero-filled. With `lock`, the pages are locked in
// RAM (mlock: "pinned" on a machine without a GPU driver); a refusal (RLIMIT_MEMLOCK)
// throws zoff::Error naming the size and the limit. Throws zoff::Error naming the size
// when the allocation fails. From kOwnMappingMinBytes on, the block is a mapping of its own
// (core/own_mapping.h): freed, it leaves RSS at once, and it is never a piece of the heap.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(size_t bytes, size_t alignment, bool lock = false);
  HostBuffer(HostBuffer&&) noexcept = default;
  HostBuffer& operator=(HostBuffer&&) noexcept = default;

  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  template <class T>
  T* as() {
    return static_cast<T*>(data());
  }
  size_t bytes() const { return bytes_; }        // as asked
  size_t capacity() const { return capacity_; }  // bytes rounded up to the alignment
  bool locked() const { return locked_; }

 private:
  struct Free {
    size_t capacity = 0;
    bool locked = false;
    bool mapped = false;  // map_own's, else malloc's
    void operator()(void* p) const;
  };
  // Built from an explicit deleter: unique_ptr cannot default-construct a deleter whose own
  // member initializers are not usable yet inside this class.
  std::unique_ptr<void, Free> data_{nullptr, Free{0, false, false}};
  size_t bytes_ = 0;
  size_t capacity_ = 0;
  bool locked_ = false;
};

}  // namespace zoff::offload
