// An owned, 64-byte aligned array of floats for optimizer state and benchmark spans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace zoff::optim {

// `size` floats starting on a cache line. From 2 MiB up: a mapping of its own, 2 MiB-aligned
// and advised for transparent huge pages (fewer TLB misses on multi-GB state), never a piece
// of malloc's heap, where the advice split the heap's mapping and, measured, slowed the bf16
// step (see the .cpp).
// Contents are uninitialised (the mapping's are zero); the owner fills them (possibly from
// several threads: first touch).
class AlignedFloats {
 public:
  AlignedFloats() = default;
  explicit AlignedFloats(size_t size);

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(float); }

 private:
  struct Free {
    // Constructors, not a member initializer: unique_ptr needs Free default-constructible
    // while AlignedFloats is still incomplete.
    Free() : mapped_bytes(0) {}
    explicit Free(size_t bytes) : mapped_bytes(bytes) {}
    void operator()(float* p) const;
    size_t mapped_bytes;  // > 0: the array is a mapping of this many bytes; 0: malloc's
  };
  std::unique_ptr<float, Free> data_;
  size_t size_ = 0;
};

}  // namespace zoff::optim
