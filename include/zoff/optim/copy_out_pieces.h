// Where a fused optimizer pass writes its 16-bit copy when the elements it updates are not
// contiguous in the destination: a rank's shard is one piece of each unit, and those pieces
// sit apart in the parameters every rank of a host shares.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zoff::optim {

// Elements [begin, begin + n) of the optimizer's span are written to dst[0, n).
struct CopyOutPiece {
  size_t begin = 0;
  size_t n = 0;
  uint16_t* dst = nullptr;
};

// The pieces of one scattered copy-out, in order, tiling [0, numel) with no gap or overlap
// (pieces of n = 0 are dropped). A span cut across pieces is written run by run, each run
// the part of the span inside one piece.
class CopyOutPieces {
 public:
  CopyOutPieces() = default;
  // Throws zoff::UsageError naming the first piece that does not start where the one before
  // ends, has a null dst, or, when the pieces end before or after `numel`, naming both.
  CopyOutPieces(std::vector<CopyOutPiece> pieces, size_t numel);

  size_t numel() const { return numel_; }
  const std::vector<CopyOutPiece>& pieces() const { return pieces_; }

  // The piece holding element i (< numel()).
  const CopyOutPiece& piece_of(size_t i) const;

  // Calls fn(b, k, dst) for each run [b, b + k) of [begin, begin + n) inside one piece, in
  // order; dst is where element b goes.
  template <class Fn>
  void for_each_run(size_t begin, size_t n, const Fn& fn) const {
    const size_t end = begin + n;
    for (size_t b = begin; b < end;) {
      const CopyOutPiece& p = piece_of(b);
      const size_t k = (p.begin + p.n < end ? p.begin + p.n : end) - b;
      fn(b, k, p.dst + (b - p.begin));
      b += k;
    }
  }

  // Copies src[0, n), the copy-out of elements [begin, begin + n), into the pieces.
  void scatter(size_t begin, size_t n, const uint16_t* src) const;

 private:
  std::vector<CopyOutPiece> pieces_;
  size_t numel_ = 0;
};

}  // namespace zoff::optim
