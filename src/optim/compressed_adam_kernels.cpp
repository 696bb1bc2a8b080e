// Fused Adam / AdamW over bf16 and int8 states, and the streaming probe of their memory
// traffic, compiled per SIMD target by Highway.
//
// The bf16-state update is adam_update (kernel_lanes-inl.h), the fp32 kernel's own math; only
// the loads and stores of m and v differ. The int8 one folds the betas into the decoders and
// multiplies by the bias correction's inverse (int8_adam_update_root): two multiplications
// and a division fewer in a loop bound by its arithmetic. Tails shorter than a vector run on
// one-lane vectors of the same target, so the result of an element does not depend on where a span
// is cut. First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "simd_targets.h"
#undef HWY_TARGET_INCLUDE
// Resolved against the include path (<repo>/include), as in fused_kernels.cpp.
#define HWY_TARGET_INCLUDE "../src/optim/compressed_adam_kernels.cpp"
#include <hwy/cache_control.h>
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernel_lanes-inl.h"
#include "zoff/core/error.h"
#include "zoff/optim/compressed_adam.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace optim {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <CopyOut kOut, class D>
HWY_INLINE void adam_bf16_lanes(D d, const AdamCoefficients& c, float* HWY_RESTRICT p,
                                const float* HWY_RESTRICT g, uint16_t* HWY_RESTRICT m,
                                uint16_t* HWY_RESTRICT v, uint16_t* HWY_RESTRICT out) {
  auto vp = hn::LoadU(d, p);
  auto vm = load_bf16(d, m);
  auto vv = load_bf16(d, v);
  adam_update(d, c, vp, hn::LoadU(d, g), vm, vv);
  store_out16<CopyOut::kBf16>(d, vm, m);  // the bf16 rounding of the copy-out: RNE
  store_out16<CopyOut::kBf16>(d, vv, v);
  hn::StoreU(vp, d, p);
  store_out16<kOut>(d, vp, out);
}

// bit_sqrt and bit_square of state_dtype.h, lane by lane: integer operations on the bits.
template <class D>
HWY_INLINE hn::Vec<D> bit_sqrt_lanes(D d, hn::Vec<D> y, uint32_t bias) {
  const hn::RebindToUnsigned<D> du;
  const auto bits = hn::And(hn::BitCast(du, y), hn::Set(du, 0x7FFFFFFFu));
  return hn::BitCast(d, hn::Add(hn::ShiftRight<1>(bits), hn::Set(du, bias)));
}

template <class D>
HWY_INLINE hn::Vec<D> bit_square_lanes(D d, hn::Vec<D> r, uint32_t bias) {
  const hn::RebindToUnsigned<D> du;
  const auto b = hn::Set(du, bias);
  return hn::BitCast(d, hn::ShiftLeft<1>(hn::Sub(hn::Max(hn::BitCast(du, r), b), b)));
}

// CopySign(magnitude, sign) for a magnitude whose sign bit is clear (bit_square's and
// bit_sqrt's results, which are never negative, NaN included): one ternlog that overwrites
// the magnitude, where CopySign's overwrites a copy of the sign-bit constant, one more
// instruction, and the int8 loop is bound by their count.
template <class V>
HWY_INLINE V with_sign_of(V magnitude, V sign) {
  const hn::DFromV<V> d;
  return hn::OrAnd(magnitude, sign, hn::SignBit(d));
}

// Decoders and encoders of state_dtype.h, lane by lane, with the same operations in the same
// order as decode_signed / encode_signed / decode_unsigned / encode_unsigned. The decoders
// take the block's step (signed_code_step / unsigned_code_step of its scale).
template <class D>
HWY_INLINE hn::Vec<D> decode_signed_lanes(D d, const int8_t* HWY_RESTRICT q, hn::Vec<D> step) {
  const hn::Rebind<int8_t, D> d8;
  const hn::RebindToSigned<D> di;
  const auto r = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q)));
  return hn::Mul(with_sign_of(bit_square_lanes(d, r, kSignedCodeBias), r), step);
}

template <class D>
HWY_INLINE hn::Vec<D> decode_unsigned_lanes(D d, const uint8_t* HWY_RESTRICT q, hn::Vec<D> step) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::RebindToSigned<D> di;
  const auto r = hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q)));
  const auto b = bit_square_lanes(d, r, kUnsignedCodeBias);
  return hn::Mul(hn::Mul(b, b), step);
}

// The coefficients of the int8 update as vectors, made once per block rather than per
// vector: built inside the loop, GCC reloaded them from the stack and negated the step size
// again for every vector (code stores, char typed, may alias any local whose address escaped).
template <class D>
struct Int8UpdateLanes {
  hn::Vec<D> decay, l2, one_minus_beta1, one_minus_beta2, inv_bc2, eps, neg_step_size;
  Int8UpdateLanes(D d, const AdamCoefficients& c, float inv_bias_correction2)
      : decay(hn::Set(d, c.decay)),
        l2(hn::Set(d, c.l2)),
        one_minus_beta1(hn::Set(d, c.one_minus_beta1)),
        one_minus_beta2(hn::Set(d, c.one_minus_beta2)),
        inv_bc2(hn::Set(d, inv_bias_correction2)),
        eps(hn::Set(d, c.eps)),
        neg_step_size(hn::Set(d, -c.step_size)) {}
};

// The int8 kernel's Adam / AdamW update (compressed_adam.h, int8_adam_update): m and v come
// in as beta1 m and beta2 v (the decoders' steps carry the betas) and leave as the new m and
// v; the bias correction multiplies by its inverse. Returns sqrt(v) of the new v, which the
// encoder of v reuses. kL2: kNone or kAdded (the loop is instantiated for each).
template <L2Term kL2, class D, class V>
HWY_INLINE V int8_adam_update_root(D d, const Int8UpdateLanes<D>& coef, V& p, V g, V& m, V& v) {
  p = hn::Mul(p, coef.decay);
  if (kL2 == L2Term::kAdded) g = fmadd(d, p, coef.l2, g);
  m = fmadd(d, g, coef.one_minus_beta1, m);
  v = fmadd(d, hn::Mul(coef.one_minus_beta2, g), g, v);
  const auto root = hn::Sqrt(v);
  const auto denom = fmadd(d, root, coef.inv_bc2, coef.eps);
  p = hn::Add(p, hn::Div(hn::Mul(coef.neg_step_size, m), denom));
  return root;
}

// Stores the codes round(y) of y in [-255, 255] (already clamped, no NaN), rounded to nearest
// even, as int8 (kSigned) or uint8. On AVX-512 with whole vectors: one conversion and one
// narrowing store (Highway's NearestInt guards against int32 overflow, which a clamped y
// cannot reach, and its DemoteTo packs and permutes); elsewhere Highway's ops, same result.
template <bool kSigned, class D>
HWY_INLINE void store_codes(D d, hn::Vec<D> y, void* HWY_RESTRICT q) {
#if HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) == 16) {
    const __m512i codes = _mm512_cvtps_epi32(y.raw);  // MXCSR's mode: nearest, ties to even
    if constexpr (kSigned) {
      _mm_storeu_si128(static_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(codes));
    } else {
      _mm_storeu_si128(static_cast<__m128i*>(q), _mm512_cvtusepi32_epi8(codes));
    }
    return;
  }
#endif
  using T = std::conditional_t<kSigned, int8_t, uint8_t>;
  const hn::Rebind<T, D> d8;
  hn::StoreU(hn::DemoteTo(d8, hn::NearestInt(y)), d8, static_cast<T*>(q));
}

// round(min(bit_sqrt(x factor, kSignedCodeBias), 127)) sign(x).
template <class D>
HWY_INLINE void encode_signed_lanes(D d, hn::Vec<D> x, hn::Vec<D> factor, int8_t* HWY_RESTRICT q) {
  const auto scaled = hn::Mul(x, factor);
  const auto r = hn::Min(bit_sqrt_lanes(d, scaled, kSignedCodeBias), hn::Set(d, kSignedCodeMax));
  // Rounding to nearest even is symmetric, so the sign can go on before it.
  store_codes<true>(d, with_sign_of(r, scaled), q);
}

// v's code from root = sqrt(v) (which the update computed):
// round(min(bit_sqrt(root factor, kUnsignedCodeBias), 255)).
template <class D>
HWY_INLINE void encode_unsigned_root_lanes(D d, hn::Vec<D> root, hn::Vec<D> factor,
                                           uint8_t* HWY_RESTRICT q) {
  const auto y = bit_sqrt_lanes(d, hn::Mul(root, factor), kUnsignedCodeBias);
  store_codes<false>(d, hn::Min(y, hn::Set(d, kUnsignedCodeMax)), q);
}

// The running max of a >= 0, NaN never wins (as encode_int8_blocks): Max returns the other
// operand when one is NaN, on x86 (the second, acc, which is never NaN) and HWY_SCALAR alike.
template <class V>
HWY_INLINE V fold_absmax(V acc, V a) {
  return hn::Max(a, acc);
}

// The largest lane of acc (all >= 0, no NaN), folded in the same way.
template <class D>
HWY_INLINE float reduce_absmax(D d, hn::Vec<D> acc, float s) {
  HWY_ALIGN float folded[hn::MaxLanes(d)];
  hn::Store(acc, d, folded);
  for (size_t k = 0; k < hn::Lanes(d); ++k) s = s < folded[k] ? folded[k] : s;
  return s;
}

// store_out16, with the bf16 copy-out in one instruction where the CPU has one (kNative).
// vcvtneps2bf16 rounds normal numbers to nearest even exactly as store_out16 does, but
// flushes subnormals to zero and quiets NaNs (store_out16 writes 0xFFFF): a vector with either
// takes store_out16's path, so the bits written are the same. 9 instructions become 3 in the
// int8 loop, which is bound by its instruction count.
template <CopyOut kOut, bool kNative, class D>
HWY_INLINE void store_copy(D d, hn::Vec<D> p, uint16_t* HWY_RESTRICT out) {
#if HWY_TARGET <= HWY_AVX3
  if constexpr (kNative && kOut == CopyOut::kBf16 && hn::MaxLanes(D()) == 16) {
    constexpr int kNanOrSubnormal = 0x01 | 0x20 | 0x80;  // QNaN, denormal, SNaN
    if (HWY_LIKELY(_mm512_fpclass_ps_mask(p.raw, kNanOrSubnormal) == 0)) {
      __m256i bf16;
      // As an instruction, not an intrinsic: Highway's AVX-512 target lacks AVX512_BF16.
      asm("vcvtneps2bf16 %1, %0" : "=v"(bf16) : "v"(p.raw));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bf16);
      return;
    }
  }
#endif
  store_out16<kOut>(d, p, out);
}

// A prefetch into L2 (prefetcht1), not L1: the int8 loop's two scratch blocks (2 x 16 KiB)
// fill a 32 KiB L1, so lines prefetched into L1 could be evicted before their use. At 50M
// parameters on 2 threads, the int8 kernel ran at 0.89x of its streaming probe against 0.83x
// with prefetcht0 (medians of 8 alternating pairs, higher in all 8; 1.33x against 1.27x the
// fp32 kernel with copy-out in the same runs); in L2 no change.
template <class T>
HWY_INLINE void prefetch_l2(const T* p) {
  __builtin_prefetch(p, /*rw=*/0, /*locality=*/2);
}

// Elements ahead that the update pass prefetches (4 KiB of p and of g, 1 KiB of each code
// array, 2 KiB of the copy-out): the kernel is compute-heavy enough that the hardware
// prefetcher alone leaves it waiting on memory (at 50M parameters, one thread: 1.62 G
// params/s without, 1.99 with; 512 to 4096 measured, 1024 best by a few percent). With the
// encoding interleaved in the update loop, 2048 was within the noise of 1024 at 50M and 1M.
constexpr size_t kPrefetchAhead = 1024;

// Vectors per group of the int8 update loop (see prefetch_group in update_int8_block).
constexpr size_t kGroupVectors = 4;

// The new m, sqrt(v) and the block's absmax of m and of v, from one int8 block's update.
// The loop keeps two: a block's update writes one while the previous block's encoding reads
// the other.
struct Int8BlockScratch {
  HWY_ALIGN float m[kStateBlock];     // the updated m, fp32 (L1-resident)
  HWY_ALIGN float root[kStateBlock];  // sqrt of the updated v
  float m_max = 0.0f;
  float v_max = 0.0f;
};

// A block whose update is done and whose codes are still to be written: its scratch, its
// codes and the factors of its new scales. x == nullptr: no block is pending.
struct PendingEncode {
  const Int8BlockScratch* x = nullptr;
  int8_t* m_codes = nullptr;
  uint8_t* v_codes = nullptr;
  float m_factor = 0.0f;
  float v_factor = 0.0f;
  size_t n = 0;
};

HWY_INLINE PendingEncode pending_encode(const Int8BlockScratch& x, const Int8AdamStates& s,
                                        size_t begin, size_t n) {
  return {&x,
          s.exp_avg + begin,
          s.exp_avg_sq + begin,
          signed_code_factor(x.m_max),
          unsigned_code_factor(x.v_max),
          n};
}

// Writes the codes of elements [i, i + Lanes(d)) of a pending block.
template <class D>
HWY_INLINE void encode_lanes_at(D d, const PendingEncode& e, size_t i) {
  encode_signed_lanes(d, hn::LoadU(d, e.x->m + i), hn::Set(d, e.m_factor), e.m_codes + i);
  encode_unsigned_root_lanes(d, hn::LoadU(d, e.x->root + i), hn::Set(d, e.v_factor), e.v_codes + i);
}

// Writes the codes of elements [from, e.n) of a pending block (from: a multiple of Lanes(d)).
HWY_INLINE void finish_encode(const PendingEncode& pending, size_t from) {
  // A local: a code store (a char type) could otherwise alias the fields and reload them.
  const PendingEncode e = pending;
  for_each_block(
      e.n, [&](auto d, size_t i) HWY_ATTR { encode_lanes_at(d, e, i); }, from);
}

// Decodes, updates and writes p (and its 16-bit copy) for n <= kStateBlock elements from
// element `begin`; leaves m, sqrt(v) and the absmaxes in `x` for the encoder. The previous
// block's codes are written vector by vector in the same loop: its encoding is all arithmetic
// on L1 data, so alone it would leave memory idle while this block's loads wait behind it.
template <CopyOut kOut, L2Term kL2, bool kNative>
HWY_INLINE void update_int8_block(const AdamCoefficients& c, float* p, const float* g,
                                  const Int8AdamStates& s, size_t block, size_t begin, size_t n,
                                  uint16_t* out, const PendingEncode& previous,
                                  Int8BlockScratch& x) {
  // Locals, not loads through `s`: the compiler cannot tell that stores to p do not move them.
  const int8_t* HWY_RESTRICT m_codes = s.exp_avg + begin;
  const uint8_t* HWY_RESTRICT v_codes = s.exp_avg_sq + begin;
  // The decoders give beta1 m and beta2 v directly (int8_adam_update_root).
  const float m_step = int8_m_step(c, s.exp_avg_scales[block]);
  const float v_step = int8_v_step(c, s.exp_avg_sq_scales[block]);
  const float inv_bc2 = int8_inverse_bias_correction(c);
  p += begin;
  g += begin;
  if (kOut != CopyOut::kNone) out += begin;
  // Inlined by force: GCC would otherwise call it once per vector (three call sites).
  auto lanes = [&](auto d, const auto& coef, size_t i, auto& m_acc, auto& v_acc) HWY_ATTR
      __attribute__((always_inline)) {
    prefetch_l2(p + i + kPrefetchAhead);
    prefetch_l2(g + i + kPrefetchAhead);
    auto vp = hn::LoadU(d, p + i);
    auto vm = decode_signed_lanes(d, m_codes + i, hn::Set(d, m_step));
    auto vv = decode_unsigned_lanes(d, v_codes + i, hn::Set(d, v_step));
    const auto root = int8_adam_update_root<kL2>(d, coef, vp, hn::LoadU(d, g + i), vm, vv);
    hn::StoreU(vm, d, x.m + i);
    hn::StoreU(root, d, x.root + i);
    hn::StoreU(vp, d, p + i);
    store_copy<kOut, kNative>(d, vp, kOut == CopyOut::kNone ? nullptr : out + i);
    m_acc = fold_absmax(m_acc, hn::Abs(vm));
    v_acc = fold_absmax(v_acc, vv);  // v >= +0: a sum of products of squares and betas
  };
  // The codes and the copy-out of a group of kGroupVectors vectors (64 codes of each state, a
  // cache line, and 128 bytes of copy-out on AVX-512): prefetched once per group, not once
  // per vector as p and g (a line per vector), which saves instructions in a loop bound by
  // their count.
  auto prefetch_group = [&](size_t i) HWY_ATTR __attribute__((always_inline)) {
    prefetch_l2(m_codes + i + kPrefetchAhead);
    prefetch_l2(v_codes + i + kPrefetchAhead);
    if (kOut != CopyOut::kNone) {
      prefetch_l2(out + i + kPrefetchAhead);
      prefetch_l2(out + i + kPrefetchAhead + 32);
    }
  };
  const hn::ScalableTag<float> d;
  const size_t lanes_d = hn::Lanes(d);
  const Int8UpdateLanes<hn::ScalableTag<float>> coef(d, c, inv_bc2);
  auto m_acc = hn::Zero(d), v_acc = hn::Zero(d);
  size_t i = 0;
  const PendingEncode prev = previous;  // a local, as `c`: stores cannot move its fields
  auto vector_at = [&](size_t at, auto encode_previous) HWY_ATTR __attribute__((always_inline)) {
    lanes(d, coef, at, m_acc, v_acc);
    if constexpr (decltype(encode_previous)::value) encode_lanes_at(d, prev, at);
  };
  auto vectors = [&](auto encode_previous) HWY_ATTR {
    for (; i + kGroupVectors * lanes_d <= n; i += kGroupVectors * lanes_d) {
      prefetch_group(i);
#pragma GCC unroll 4
      for (size_t k = 0; k < kGroupVectors; ++k) vector_at(i + k * lanes_d, encode_previous);
    }
    for (; i + lanes_d <= n; i += lanes_d) {
      prefetch_group(i);
      vector_at(i, encode_previous);
    }
  };
  // A block before the last is whole, so `previous` has at least as many elements as this one.
  if (prev.x != nullptr) {
    vectors(std::true_type{});
    finish_encode(prev, i);
  } else {
    vectors(std::false_type{});
  }
  x.m_max = reduce_absmax(d, m_acc, 0.0f);
  x.v_max = reduce_absmax(d, v_acc, 0.0f);
  const hn::CappedTag<float, 1> d1;  // the tail, one lane at a time
  const Int8UpdateLanes<hn::CappedTag<float, 1>> coef1(d1, c, inv_bc2);
  for (; i < n; ++i) {
    auto m1 = hn::Zero(d1), v1 = hn::Zero(d1);
    lanes(d1, coef1, i, m1, v1);
    x.m_max = reduce_absmax(d1, m1, x.m_max);
    x.v_max = reduce_absmax(d1, v1, x.v_max);
  }
}

template <CopyOut kOut>
HWY_NOINLINE void adam_bf16_loop(const AdamCoefficients& coefficients, float* p, const float* g,
                                 uint16_t* m, uint16_t* v, size_t n, uint16_t* out) {
  const AdamCoefficients c = coefficients;  // a local: stores to p cannot change it
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    adam_bf16_lanes<kOut>(d, c, p + i, g + i, m + i, v + i,
                          kOut == CopyOut::kNone ? nullptr : out + i);
  });
}

// Block by block: the update pass, then the block's new scales; its codes are written
// during the next block's update pass (the last block's after the loop).
template <CopyOut kOut, L2Term kL2, bool kNative>
HWY_NOINLINE void adam_int8_loop(const AdamCoefficients& coefficients, float* p, const float* g,
                                 const Int8AdamStates& s, size_t n, uint16_t* out) {
  const AdamCoefficients c = coefficients;  // a local: stores to p cannot change it
  Int8BlockScratch x[2];
  PendingEncode pending;
  for (size_t block = 0, begin = 0; begin < n; ++block, begin += kStateBlock) {
    const size_t len = std::min(kStateBlock, n - begin);
    Int8BlockScratch& current = x[block % 2];
    update_int8_block<kOut, kL2, kNative>(c, p, g, s, block, begin, len, out, pending, current);
    s.exp_avg_scales[block] = current.m_max;
    s.exp_avg_sq_scales[block] = current.v_max;
    pending = pending_encode(current, s, begin, len);
  }
  if (pending.x != nullptr) finish_encode(pending, 0);
}

template <class T>
HWY_NOINLINE void probe_states_loop(float* p, const float* g, T* m, T* v, size_t n, uint16_t* out) {
  for_each_block(n, [&](auto d, size_t i)
                        HWY_ATTR { probe_states_block(d, p + i, g + i, m + i, v + i, out + i); });
}

// Per-target entry points (the dispatch tables below point at these).
void ProbeStatesKernel(float* p, const float* g, void* m, void* v, size_t state_bytes, size_t n,
                       uint16_t* out) {
  if (state_bytes == 1) {
    return probe_states_loop(p, g, static_cast<uint8_t*>(m), static_cast<uint8_t*>(v), n, out);
  }
  probe_states_loop(p, g, static_cast<uint16_t*>(m), static_cast<uint16_t*>(v), n, out);
}

void AdamBf16StatesKernel(const AdamCoefficients& c, float* p, const float* g, uint16_t* m,
                          uint16_t* v, size_t n, CopyOut copy_out, uint16_t* out) {
  switch (copy_out) {
    case CopyOut::kNone:
      return adam_bf16_loop<CopyOut::kNone>(c, p, g, m, v, n, out);
    case CopyOut::kBf16:
      return adam_bf16_loop<CopyOut::kBf16>(c, p, g, m, v, n, out);
    case CopyOut::kFp16:
      return adam_bf16_loop<CopyOut::kFp16>(c, p, g, m, v, n, out);
  }
}

template <CopyOut kOut, bool kNative = false>
void adam_int8_l2_or_not(const AdamCoefficients& c, float* p, const float* g,
                         const Int8AdamStates& s, size_t n, uint16_t* out) {
  if (c.l2 != 0.0f) return adam_int8_loop<kOut, L2Term::kAdded, kNative>(c, p, g, s, n, out);
  adam_int8_loop<kOut, L2Term::kNone, kNative>(c, p, g, s, n, out);
}

void AdamInt8StatesKernel(const AdamCoefficients& c, float* p, const float* g,
                          const Int8AdamStates& s, size_t n, CopyOut copy_out, uint16_t* out) {
  switch (copy_out) {
    case CopyOut::kNone:
      return adam_int8_l2_or_not<CopyOut::kNone>(c, p, g, s, n, out);
    case CopyOut::kBf16:
#if HWY_TARGET <= HWY_AVX3
      if (detail::cpu_converts_bf16()) {
        return adam_int8_l2_or_not<CopyOut::kBf16, true>(c, p, g, s, n, out);
      }
#endif
      return adam_int8_l2_or_not<CopyOut::kBf16>(c, p, g, s, n, out);
    case CopyOut::kFp16:
      return adam_int8_l2_or_not<CopyOut::kFp16>(c, p, g, s, n, out);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace optim
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::optim {

HWY_EXPORT(AdamBf16StatesKernel);
HWY_EXPORT(AdamInt8StatesKernel);
HWY_EXPORT(ProbeStatesKernel);

void stream_probe_states(StateDtype dtype, float* params, const float* grads, void* exp_avg,
                         void* exp_avg_sq, size_t n, uint16_t* out16) {
  ZOFF_CHECK_ARG(dtype != StateDtype::kFp32, "stream_probe_states: fp32 states are stream_probe's");
  ZOFF_CHECK_ARG(out16 != nullptr,
                 "stream_probe_states: out16 is null (the probe has the copy-out)");
  detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(ProbeStatesKernel)
  (params, grads, exp_avg, exp_avg_sq, stored_element_bytes(dtype), n, out16);
}

void fused_adam_bf16_states(const AdamCoefficients& c, float* params, const float* grads,
                            uint16_t* exp_avg, uint16_t* exp_avg_sq, size_t n, CopyOut copy_out,
                            uint16_t* out16) {
  detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(AdamBf16StatesKernel)
  (c, params, grads, exp_avg, exp_avg_sq, n, copy_out, out16);
}

void fused_adam_int8_states(const AdamCoefficients& c, float* params, const float* grads,
                            const Int8AdamStates& states, size_t n, CopyOut copy_out,
                            uint16_t* out16) {
  detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(AdamInt8StatesKernel)(c, params, grads, states, n, copy_out, out16);
}

}  // namespace zoff::optim
#endif  // HWY_ONCE
