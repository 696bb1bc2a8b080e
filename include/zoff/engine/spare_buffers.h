// Buffers released during a step, kept for the next request they fit, within a byte cap.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

namespace zoff::engine {

// A released buffer that is mapped afresh faults its pages in again on first use; stage 3
// releases and requests buffers of the same few sizes all through forward and backward
// (the units' gathered buffers, the tier's piece read buffers). SpareBuffers keeps
// released ones, at most `cap` bytes, for the next request of a fitting size; the owner
// empties it when backward ends (the gatherer's units always; a tier's pieces unless they
// keep their buffers between steps). Not thread-safe: the
// owner's lock covers it.
template <class Buffer>
class SpareBuffers {
 public:
  void set_cap(size_t cap) { cap_ = cap; }
  // Whether a buffer of `bytes` can be kept now.
  bool fits(size_t bytes) const { return bytes > 0 && bytes_ + bytes <= cap_; }
  // Keeps `buffer` of `bytes`; fits(bytes) must hold.
  void keep(Buffer buffer, size_t bytes) {
    bytes_ += bytes;
    kept_.emplace_back(bytes, std::move(buffer));
  }
  // A kept buffer of `least` to `most` bytes, taken out; nullopt when none is kept.
  std::optional<Buffer> take(size_t least, size_t most) {
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->first < least || it->first > most) continue;
      Buffer buffer = std::move(it->second);
      bytes_ -= it->first;
      kept_.erase(it);
      return buffer;
    }
    return std::nullopt;
  }
  // Frees the buffer kept longest; false when none is kept.
  bool drop_oldest() {
    if (kept_.empty()) return false;
    bytes_ -= kept_.front().first;
    kept_.erase(kept_.begin());
    return true;
  }
  void clear() {
    kept_.clear();
    bytes_ = 0;
  }
  size_t bytes() const { return bytes_; }

 private:
  std::vector<std::pair<size_t, Buffer>> kept_;
  size_t bytes_ = 0;
  size_t cap_ = 0;
};

// The sum of the two largest sizes added: the spares' cap (a buffer released while the next
// one of the largest size is requested, and one more).
class TwoLargest {
 public:
  void add(size_t bytes) {
    second_ = std::max(second_, bytes);
    if (second_ > first_) std::swap(first_, second_);
  }
  size_t sum() const { return first_ + second_; }

 private:
  size_t first_ = 0;
  size_t second_ = 0;
};

}  // namespace zoff::engine
