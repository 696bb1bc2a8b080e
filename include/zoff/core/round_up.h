// Rounding a size or offset (bytes, elements) up or down to a multiple of a unit: page,
// cache line, sector, slot or block alignment.
#pragma once

#include <cstddef>

namespace zoff {

// The smallest multiple of `unit` (> 0) that is >= n; n + unit - 1 must not overflow (every
// caller rounds sizes far below SIZE_MAX: allocations, file offsets, segment layouts).
constexpr size_t round_up(size_t n, size_t unit) { return (n + unit - 1) / unit * unit; }

// The largest multiple of `unit` (> 0) that is <= n.
constexpr size_t round_down(size_t n, size_t unit) { return n / unit * unit; }

}  // namespace zoff
