// The split master: an fp32 master weight stored as its bf16 compute copy plus a 16-bit
// extension (4 bytes, not 2 + 4), from which the exact fp32 value is rebuilt.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zoff::optim {

// Note: the encoding. An fp32 pattern b = (upper << 16) | low; its bf16 compute copy is b
// rounded to nearest even (LibTorch's conversion, and the fused copy-out's), the extension
// is `low`. Rounding to nearest even cannot be undone from (copy, low) alone at one kind of
// pattern: a tie (low == 0x8000) with an odd `upper` rounds up to the same even copy that
// the tie one below it (even `upper`) rounds down to. So a split master never holds that
// kind of pattern: split_master_settle() moves it one fp32 ulp away from zero (low 0x8001),
// which rounds to the same copy. That happens to about 1 element in 2^17 per step and moves
// it by 2^-24 of its value, a sixteenth of the fp32 update's own rounding; the compute copy
// is always the rounding of what the 4-byte master would hold, and every other master value
// is the same bit for bit. Then
//   upper = copy - (low > 0x8000)
// exactly, carries across exponents and rounding up to inf included. A NaN master stays a
// NaN (its copy is a NaN whatever the payload), its payload is not kept.
// tests/optim/split_master_test.cpp runs all 2^32 patterns.

// The pattern as a split master stores it: `bits`, or one ulp away from zero at an odd tie
// (whose copy, rounded to nearest even, is the same).
inline uint32_t split_master_settle(uint32_t bits) {
  const bool odd_tie = (bits & 0x1FFFFu) == 0x18000u;  // low == 0x8000, upper odd
  const bool nan = (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0;
  return odd_tie && !nan ? bits + 1u : bits;
}

// The bf16 compute copy of a settled pattern: round to nearest even (NaNs: quiet, sign kept).
inline uint16_t split_master_copy(uint32_t settled) {
  if ((settled & 0x7F800000u) == 0x7F800000u && (settled & 0x007FFFFFu) != 0) {
    return static_cast<uint16_t>((settled >> 16) | 0x0040u);
  }
  return static_cast<uint16_t>((settled + 0x7FFFu + ((settled >> 16) & 1u)) >> 16);
}

// The extension stored beside the copy: the low 16 bits of the settled pattern.
inline uint16_t split_master_extension(uint32_t settled) { return static_cast<uint16_t>(settled); }

// The settled fp32 pattern rebuilt from its copy and extension (a NaN copy gives a NaN).
inline uint32_t split_master_join(uint16_t copy, uint16_t extension) {
  const bool nan = (copy & 0x7F80u) == 0x7F80u && (copy & 0x007Fu) != 0;
  const uint32_t upper = nan ? copy : static_cast<uint32_t>(copy) - (extension > 0x8000u ? 1u : 0u);
  return (upper << 16) | extension;
}

// n fp32 values settled in place (a master that starts from a model's values).
void split_master_settle(float* values, size_t n);
// n fp32 masters, settled in place, into their copies and extensions. Returns how many
// were settled (odd ties).
size_t split_master_encode(float* master, size_t n, uint16_t* copy, uint16_t* extension);
// The same from masters that stay as they are (a checkpoint's values being stored): the
// copies and extensions are those of the settled values. Returns how many were settled.
size_t split_master_encode_from(const float* master, size_t n, uint16_t* copy, uint16_t* extension);
// The extensions of n masters taken from outside (a model's values filled in), which must
// already be settled: throws zoff::Error naming the first that is not (its index counted
// from `first`, and its bits).
void split_master_extensions(const float* settled, size_t n, uint16_t* extension, size_t first = 0);
// n fp32 masters from their copies and extensions.
void split_master_decode(const uint16_t* copy, const uint16_t* extension, size_t n, float* master);

}  // namespace zoff::optim
