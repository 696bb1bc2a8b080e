// An owned, 64-byte aligned array of floats for optimizer state and benchmark spans.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace zoff::optim {

// `size` floats starting on a cache line (2 MiB-aligned and advised for transparent huge
// pages when at least 2 MiB, which saves TLB misses on multi-GB state). Contents are
// uninitialised; the owner fills them (possibly from several threads: first touch).
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
    void operator()(float* p) const;
  };
  std::unique_ptr<float, Free> data_;
  size_t size_ = 0;
};

}  // namespace zoff::optim
