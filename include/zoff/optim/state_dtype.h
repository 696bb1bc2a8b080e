// Storage formats of Adam's exp_avg / exp_avg_sq: fp32, bf16, or int8 codes with block scales.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zoff::optim {

// How an optimizer state is stored between steps; the update itself always runs in fp32
// (a state is decoded, updated and encoded again in the same pass), and the master stays fp32.
//   kFp32: 4 bytes per element, the plain float.
//   kBf16: 2 bytes per element, round to nearest even (NaN -> 0xFFFF, as float_to_bf16).
//   kInt8: 1 byte per element plus one fp32 scale (the block's absmax) per kStateBlock
//          elements: block-wise quantization after Dettmers et al. 2022, "8-bit Optimizers
//          via Block-wise Quantization". Blocks are counted from the state's element 0; the
//          last one may be partial.
enum class StateDtype { kFp32, kBf16, kInt8 };

// "fp32" | "bf16" | "int8" -> dtype; anything else throws zoff::UsageError naming the value.
StateDtype parse_state_dtype(const std::string& name);
std::string state_dtype_name(StateDtype dtype);

// Elements per int8 block (the paper's block size: small enough that one outlier only costs
// its own 2048 neighbours their precision, large enough that the scale is 0.2% overhead).
constexpr size_t kStateBlock = 2048;

// Int8 blocks of a state of n elements: ceil(n / kStateBlock).
constexpr size_t state_blocks(size_t n) { return (n + kStateBlock - 1) / kStateBlock; }

// Bytes one state of n elements takes as stored: 4 n (fp32), 2 n (bf16),
// n + 4 state_blocks(n) (int8: codes plus fp32 scales).
size_t state_storage_bytes(StateDtype dtype, size_t n);
// Bytes per stored state element: 4 fp32, 2 bf16, 1 int8 (the codes; scales apart).
size_t stored_element_bytes(StateDtype dtype);

// Elements per sub-group of a tier-streamed step (zero_optimization.sub_group_size =
// `requested`) over a shard of `numel` elements in a tier of `alignment` bytes, with states
// stored `state_bytes` per element: a multiple of alignment / 2 (the 16-bit copy of a
// sub-group starts aligned), no bigger than the shard rounded up; with compressed states,
// rounded up to whole int8 blocks and aligned stored pieces as well.
int64_t round_sub_group(int64_t requested, size_t alignment, size_t numel, size_t state_bytes);

// The int8 mappings. Both are power-law ("companding") maps of x / scale, where scale is the
// block's absmax, so the codes are dense near zero like the paper's dynamic map but need no
// lookup table (a square and a square root per element, exact IEEE operations, so a SIMD
// kernel and these scalar functions give the same codes bit for bit):
//   exp_avg (m, signed): q = round(127 sqrt(|x| / s)) sign(x), q in [-127, 127];
//     m = s (q / 127)^2 sign(q). Relative step 2 / |q|: 1.6% at the block max, and values
//     down to s / 64000 stay non-zero (linear int8 would zero everything below s / 254).
//   exp_avg_sq (v, unsigned): q = round(255 (v / s)^(1/4)), q in [0, 255];
//     v = s (q / 255)^4. This is a square map of sqrt(v), the quantity Adam divides by:
//     sqrt(v) keeps a relative step of 2 / q, and v stays non-zero down to s / 6.8e10.
//     In gradient terms v underflows below ~4e-6 of its block's largest |g|, m already
//     below ~1.6e-5, so a stored v of zero under a non-zero m (a step of m / eps) is rare.
// Other powers were measured on the tests' AdamW problems (compressed_state_accuracy_test):
// sqrt(v) linear (power 2 for v) lets v underflow under a live m and blows up; powers 4 / 8
// (m / v) cost so much precision near the block max that the loss stalled far above fp32's.
// Rounding is to nearest even; codes saturate at 127 / 255, and NaN encodes as the largest
// code (non-finite states are not supported, but they must not be undefined behaviour).
// Known limit of deterministic rounding (bf16 too): a change smaller than half a code step
// is lost, and v with beta2 = 0.999 moves ~0.1% per step once t is large, so v tends to stay
// put until a larger gradient arrives; stochastic rounding would remove that bias.
// The constants fold into one factor per block, so an encoder is a multiply, a square root
// and a rounding, and a decoder two multiplies (one per power of two) and one by the step:
//   encode_signed(x, f)   = round(min(sqrt(|x f|), 127)) sign(x),  f = signed_code_factor(s);
//   decode_signed(q, s)   = q |q| signed_code_step(s);
//   encode_unsigned(x, f) = round(min(sqrt(sqrt(x) f), 255)),   f = unsigned_code_factor(s);
//   decode_unsigned(q, s) = (q q)(q q) unsigned_code_step(s).
// encode_unsigned takes sqrt(x) first because the step already has sqrt(v) for Adam's
// denominator: the fused kernel encodes v with one more square root, not two.
float signed_code_factor(float scale);    // 127^2 / scale, or 0 when scale is 0 or it overflows
float unsigned_code_factor(float scale);  // 255^2 / sqrt(scale), or 0 likewise
float signed_code_step(float scale);      // scale / 127^2
float unsigned_code_step(float scale);    // scale / 255^4
int8_t encode_signed(float x, float factor);
float decode_signed(int8_t q, float scale);
uint8_t encode_unsigned(float x, float factor);
float decode_unsigned(uint8_t q, float scale);

// Int8-encodes n floats in blocks of kStateBlock elements from element 0, as the step does:
// a block's scale is its largest |x| (NaN ignored), each element is encode_signed (is_signed)
// with signed_code_factor(scale) or encode_unsigned with unsigned_code_factor(scale). codes: n
// bytes (int8_t bits when signed); scales: state_blocks(n) floats.
void encode_int8_blocks(const float* x, size_t n, bool is_signed, uint8_t* codes, float* scales);

// bf16 bits -> float (exact).
float bf16_to_float(uint16_t bits);

// The largest codes as floats: the encoders clamp to them.
constexpr float kSignedCodeMax = 127.0f;
constexpr float kUnsignedCodeMax = 255.0f;

}  // namespace zoff::optim
