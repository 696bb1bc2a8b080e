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

// The int8 mappings. Both are square-root ("companding") maps of x / scale, where scale is
// the block's absmax, so the codes are dense near zero like the paper's dynamic map but need
// no lookup table. The square root is read off the float's bits rather than computed:
//   bit_sqrt(y) = float(((bits(y) & 0x7FFFFFFF) >> 1) + kBitSqrtBias),
// which halves the exponent and the mantissa together: for y = 4^k (1 + f), f in [0, 1),
// bit_sqrt(y) = 2^k (1 + f / 2); for y = 2 4^k (1 + f), 2^k (3 + f) / 2. It is continuous,
// increasing, equal to sqrt at every power of four and at most 6.1% above it elsewhere, and
// bit_square, its inverse, is a subtraction and a shift. A power of two 2^e times bit_sqrt
// is the same with the bias kBitSqrtBias + (e << 23), so a code's 128 or 256 levels cost
// nothing either. Why: a fused int8 step is bound by its instruction count once it has no
// more square roots than the fp32 step (one, for Adam's denominator; with a true square
// root map it had three), and these are two or three integer operations each way.
//   exp_avg (m, signed): q = round(128 bit_sqrt(|x| t / s)) sign(x), q in [-127, 127], with
//     t = kSignedCodeTop = bit_square(127 / 128) = 63 / 64, so the block max is code 127;
//     m = bit_square(|q| / 128) (s / t) sign(q). Relative error at most
//     sqrt(2) / (128 sqrt(|x| t / s)) (a true square root has 1 / (...)): 1.1% at the block
//     max, and values down to s / 64000 stay non-zero (linear int8 zeroes below s / 254).
//   exp_avg_sq (v, unsigned): q = round(256 bit_sqrt(sqrt(v / s) u)), q in [0, 255], with
//     u = kUnsignedCodeTop = bit_square(255 / 256) = 127 / 128; v = bit_square(q / 256)^2 s / u^2.
//     A square-root map of sqrt(v), the quantity Adam divides by (the step has it already):
//     v stays non-zero down to s / 6.8e10. In gradient terms v underflows below ~4e-6 of
//     its block's largest |g|, m already below ~1.6e-5, so a stored v of zero under a
//     non-zero m (a step of m / eps) is rare.
// Other powers were measured on the tests' AdamW problems (compressed_state_accuracy_test):
// sqrt(v) linear (power 2 for v) lets v underflow under a live m and blows up; powers 4 / 8
// (m / v) cost so much precision near the block max that the loss stalled far above fp32's.
// Every operation is an exact IEEE operation or integer arithmetic on the bits, so a SIMD
// kernel and these scalar functions give the same codes bit for bit. Rounding is to nearest
// even; codes saturate at 127 / 255, and NaN encodes as the largest code (non-finite states
// are not supported, but they must not be undefined behaviour).
// Known limit of deterministic rounding (bf16 too): a change smaller than half a code step
// is lost, and v with beta2 = 0.999 moves ~0.1% per step once t is large, so v tends to stay
// put until a larger gradient arrives; stochastic rounding would remove that bias.
// The constants fold into one factor and one step per block:
//   encode_signed(x, f)   = round(min(bit_sqrt(x f, kSignedCodeBias), 127)) sign(x),
//                           f = signed_code_factor(s) = t / s;
//   decode_signed(q, s)   = bit_square(q, kSignedCodeBias) sign(q) signed_code_step(s),
//                           signed_code_step(s) = s / t;
//   encode_unsigned(x, f) = round(min(bit_sqrt(sqrt(x) f, kUnsignedCodeBias), 255)),
//                           f = unsigned_code_factor(s) = u / sqrt(s);
//   decode_unsigned(q, s) = (b b) unsigned_code_step(s), b = bit_square(q, kUnsignedCodeBias),
//                           unsigned_code_step(s) = s / u^2.
// encode_unsigned takes sqrt(x) first because the step already has sqrt(v) for Adam's
// denominator. Checkpoints name the map (kInt8MapName) and refuse codes of another one.
inline constexpr const char* kInt8MapName = "bit-sqrt";
inline constexpr uint32_t kBitSqrtBias = 127u << 22;  // half of 1.0f's bits: bit_sqrt(1) = 1
inline constexpr uint32_t kSignedCodeBias = kBitSqrtBias + (7u << 23);    // 128 bit_sqrt
inline constexpr uint32_t kUnsignedCodeBias = kBitSqrtBias + (8u << 23);  // 256 bit_sqrt
inline constexpr float kSignedCodeTop = 63.0f / 64.0f;      // bit_square(127 / 128), exact
inline constexpr float kUnsignedCodeTop = 127.0f / 128.0f;  // bit_square(255 / 256), exact
// 2^e bit_sqrt(y) for bias = kBitSqrtBias + (e << 23); the sign bit of y is ignored, NaN and
// inf give more than any code.
float bit_sqrt(float y, uint32_t bias = kBitSqrtBias);
// The inverse: y from r = 2^e bit_sqrt(y); 0 for any r below bit_sqrt(0) (code 0); the sign
// bit of r is ignored.
float bit_square(float r, uint32_t bias = kBitSqrtBias);
float signed_code_factor(float scale);    // t / scale, or 0 when scale is 0 or it overflows
float unsigned_code_factor(float scale);  // u / sqrt(scale), or 0 likewise
float signed_code_step(float scale);      // scale / t
float unsigned_code_step(float scale);    // scale / u^2
int8_t encode_signed(float x, float factor);
float decode_signed(int8_t q, float scale);
uint8_t encode_unsigned(float x, float factor);
float decode_unsigned(uint8_t q, float scale);
// The decoders with the step given instead of the scale: decode_signed(q, s) is
// decode_signed_by_step(q, signed_code_step(s)), likewise unsigned. The int8 Adam kernel
// passes steps multiplied by beta1 / beta2, and so decodes beta1 m and beta2 v.
float decode_signed_by_step(int8_t q, float step);
float decode_unsigned_by_step(uint8_t q, float step);

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
