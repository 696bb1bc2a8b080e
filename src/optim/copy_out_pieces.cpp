// CopyOutPieces: the checks of a scattered copy-out's layout, and its lookups.
#include "zoff/optim/copy_out_pieces.h"

#include <algorithm>
#include <cstring>

#include "zoff/core/error.h"

namespace zoff::optim {

CopyOutPieces::CopyOutPieces(std::vector<CopyOutPiece> pieces, size_t numel) : numel_(numel) {
  size_t at = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const CopyOutPiece& p = pieces[i];
    if (p.n == 0) continue;
    ZOFF_CHECK_ARG(p.begin == at, "copy-out piece ", i, " starts at element ", p.begin,
                   ": the pieces before it end at ", at, " (pieces must tile the span in order)");
    ZOFF_CHECK_ARG(p.dst != nullptr, "copy-out piece ", i, " (elements [", p.begin, ", ",
                   p.begin + p.n, ")) has no destination");
    at += p.n;
    pieces_.push_back(p);
  }
  ZOFF_CHECK_ARG(at == numel, "copy-out pieces cover ", at, " elements: the span has ", numel);
}

const CopyOutPiece& CopyOutPieces::piece_of(size_t i) const {
  ZOFF_CHECK(i < numel_, "copy-out element ", i, " is past the span's ", numel_);
  // The last piece that begins at or before i.
  auto it = std::upper_bound(pieces_.begin(), pieces_.end(), i,
                             [](size_t x, const CopyOutPiece& p) { return x < p.begin; });
  return *(it - 1);
}

void CopyOutPieces::scatter(size_t begin, size_t n, const uint16_t* src) const {
  for_each_run(begin, n, [&](size_t b, size_t k, uint16_t* dst) {
    std::memcpy(dst, src + (b - begin), k * sizeof(uint16_t));
  });
}

}  // namespace zoff::optim
