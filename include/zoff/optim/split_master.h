// The split master: an fp32 master weight stored as its bf16 compute copy plus a 16-bit
// extension (4 bytes, not 2 + 4), from which the exact fp32 value is rebuilt.
#pragma once

#include <cstdint>

namespace zoff::optim {

// Note: the encoding. An fp32 pattern b = (upper << 16) | low. The bf16 compute copy is
// `upper` rounded by the dropped `low`, and the extension is `low` itself. Rounding to
// nearest even cannot be undone from (copy, low) alone: at a tie (low == 0x8000) the copy is
// even whether upper was that even value (rounded down) or the odd one below it (rounded
// up). So the split master's copy rounds ties down (toward zero, keeping `upper`) and
// everything else to nearest: it differs from round-to-nearest-even only at a tie with an
// odd `upper`, by one bf16 ulp, in about 1 of 2^17 elements per step. Then
//   upper = copy - (low > 0x8000)
// exactly, carries across exponents and rounding up to inf included. NaNs keep their
// pattern as the copy (no rounding), so a NaN's upper half comes back as it was; the one
// exception is a signalling NaN whose payload lies entirely in `low` (upper = 0x7F80 or
// 0xFF80, low != 0: 131,070 of the 2^32 patterns), whose copy must still be a NaN and is
// quieted (0x7FC0 | sign), and which therefore comes back quiet. Arithmetic never makes
// one: every other pattern round-trips bit for bit (tests/optim/split_master_test.cpp runs
// all 2^32).

// The bf16 compute copy of fp32 pattern `bits` under the split master's rounding.
inline uint16_t split_master_copy(uint32_t bits) {
  const uint32_t upper = bits >> 16;
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0) {  // NaN
    return static_cast<uint16_t>((upper & 0x007Fu) != 0 ? upper : upper | 0x0040u);
  }
  // Adding 0x7FFF carries exactly when low > 0x8000: round to nearest, ties down.
  return static_cast<uint16_t>((bits + 0x7FFFu) >> 16);
}

// The extension stored beside the copy: the dropped 16 bits.
inline uint16_t split_master_extension(uint32_t bits) { return static_cast<uint16_t>(bits); }

// The fp32 pattern rebuilt from the copy and the extension. Only for a copy split_master_copy
// made: a copy rounded otherwise (LibTorch's round to nearest even) comes back one ulp off
// at a tie, and a foreign copy 0x0000 / 0x8000 with an extension above 0x8000 wraps.
inline uint32_t split_master_join(uint16_t copy, uint16_t extension) {
  const bool nan = (copy & 0x7F80u) == 0x7F80u && (copy & 0x007Fu) != 0;
  const uint32_t upper = nan ? copy : static_cast<uint32_t>(copy) - (extension > 0x8000u ? 1u : 0u);
  return (upper << 16) | extension;
}

}  // namespace zoff::optim
