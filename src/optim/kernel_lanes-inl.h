// Per-lane building blocks shared by the Highway kernel files: FMA, 16-bit stores, the Adam math.
//
// Included once per SIMD target (after hwy/highway.h) by each file that re-includes itself
// through foreach_target.h, hence the per-target include guard instead of #pragma once.
#if defined(ZOFF_OPTIM_KERNEL_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ZOFF_OPTIM_KERNEL_LANES_INL_H_
#undef ZOFF_OPTIM_KERNEL_LANES_INL_H_
#else
#define ZOFF_OPTIM_KERNEL_LANES_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "zoff/optim/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace optim {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Lanes(d) bf16 values at `src` widened to float (exact: bf16 is the top half of a float).
template <class D>
HWY_INLINE hn::Vec<D> load_bf16(D d, const uint16_t* HWY_RESTRICT src) {
  const hn::Rebind<uint16_t, D> d16;
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, src))));
}

// Stores the Lanes(d) updated params in `p` as 16-bit values at `out`.
template <CopyOut kOut, class D>
HWY_INLINE void store_out16(D d, hn::Vec<D> p, uint16_t* HWY_RESTRICT out) {
  if constexpr (kOut == CopyOut::kBf16) {
    // Round to nearest even on the bit pattern: add 0x7FFF plus the lowest kept bit, then
    // drop the low 16 bits. NaN would round into inf, so it is replaced by 0xFFFF.
    const hn::RebindToUnsigned<D> du;
    const hn::RebindToSigned<D> di;
    const hn::Rebind<uint16_t, D> d16;
    const auto bits = hn::BitCast(du, p);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    auto r = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb)));
    r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(p)), hn::Set(du, 0xFFFFu), r);
    // r < 2^16, so narrowing is exact: on AVX-512 with whole vectors one truncating store
    // (Highway's saturating DemoteTo packs, then permutes across lanes).
#if HWY_TARGET <= HWY_AVX3
    if constexpr (hn::MaxLanes(D()) == 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r.raw));
      return;
    }
#endif
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, r)), d16, out);
  } else if constexpr (kOut == CopyOut::kFp16) {
#if HWY_TARGET == HWY_SCALAR
    (void)d;
    out[0] = float_to_fp16(hn::GetLane(p));  // one lane per vector on this target
#else
    // F16C rounds to nearest even and quiets NaNs keeping their top payload bits, as
    // LibTorch 2.x's Tensor::to(kHalf) does.
    const hn::Rebind<hwy::float16_t, D> dh;
    hn::StoreU(hn::DemoteTo(dh, p), dh, reinterpret_cast<hwy::float16_t*>(out));
#endif
  } else {
    (void)d;
    (void)p;
    (void)out;
  }
}

// a * b + c rounded once, as LibTorch's vec::fmadd on FMA hardware. HWY_SCALAR has no FMA
// instruction to call: there the exact product (24 x 24 bits fits a double) plus c is rounded
// to double and then to float, which equals the fused result except in rare double-rounding
// ties (in the tests' 10-step runs over 10^6 elements it matched LibTorch exactly).
template <class D, class V>
HWY_INLINE V fmadd(D d, V a, V b, V c) {
#if HWY_TARGET == HWY_SCALAR
  const double r = static_cast<double>(hn::GetLane(a)) * static_cast<double>(hn::GetLane(b)) +
                   static_cast<double>(hn::GetLane(c));
  return hn::Set(d, static_cast<float>(r));
#else
  (void)d;
  return hn::MulAdd(a, b, c);
#endif
}

// Whether adam_update_root adds Adam's L2 term: kAsCoefficients when c.l2 != 0. A loop too
// large for GCC to unswitch (the int8 one) would test c.l2 on every vector; it is
// instantiated for kNone and kAdded instead and picks one per call.
enum class L2Term { kAsCoefficients, kNone, kAdded };

// Adam / AdamW on Lanes(d) elements, rounding step by step as PyTorch 2.x's fused CPU Adam
// (torch.optim.AdamW(fused=True), ATen's FusedAdamKernel) does; bit for bit, measured on
// 2.15 (python/tests/test_optimizer_bitwise.py):
//   p = p * decay                        (AdamW: p *= 1 - lr wd; decay = 1 for Adam)
//   g = fma(p, l2, g)                    (Adam: grad += p wd; skipped when l2 = 0)
//   m = fma(1 - b1, g - m, m)            (exp_avg.lerp_(g, 1 - b1): lerp's small-weight form)
//   v = fma((1 - b2) * g, g, v * b2)     (exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2))
//   p = p + (-step_size * m) / (sqrt(v) / sqrt(bc2) + eps)   (p.addcdiv_(m, denom, -ss))
// p, m and v come in as the old values and leave as the new ones; g is this step's gradient.
// Returns sqrt(v) of the new v, which the int8 encoder of v reuses (one square root fewer).
template <L2Term kL2 = L2Term::kAsCoefficients, class D, class V>
HWY_INLINE V adam_update_root(D d, const AdamCoefficients& c, V& p, V g, V& m, V& v) {
  p = hn::Mul(p, hn::Set(d, c.decay));
  if (kL2 == L2Term::kAdded || (kL2 == L2Term::kAsCoefficients && c.l2 != 0.0f)) {
    g = fmadd(d, p, hn::Set(d, c.l2), g);
  }
  m = fmadd(d, hn::Set(d, c.one_minus_beta1), hn::Sub(g, m), m);
  v = fmadd(d, hn::Mul(hn::Set(d, c.one_minus_beta2), g), g, hn::Mul(v, hn::Set(d, c.beta2)));
  const auto root = hn::Sqrt(v);
  const auto denom = hn::Add(hn::Div(root, hn::Set(d, c.bias_correction2_sqrt)), hn::Set(d, c.eps));
  p = hn::Add(p, hn::Div(hn::Mul(hn::Set(d, -c.step_size), m), denom));
  return root;
}

// adam_update_root without the root.
template <class D, class V>
HWY_INLINE void adam_update(D d, const AdamCoefficients& c, V& p, V g, V& m, V& v) {
  (void)adam_update_root(d, c, p, g, m, v);
}

// Runs `block` over [from, n): full vectors, then one-lane vectors for the tail.
// `block(d, i)` handles elements [i, i + Lanes(d)). `from` is 0 or a multiple of the full
// vector's lanes, so an element gets the same vector width whatever `from` is.
template <class Block>
HWY_INLINE void for_each_block(size_t n, const Block& block, size_t from = 0) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  size_t i = from;
  for (; i + lanes <= n; i += lanes) block(d, i);
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) block(d1, i);
}

// The probes' parameter traffic: p += g (read p, write p) and, unless kOut is kNone, the
// 16-bit copy of the new p.
template <CopyOut kOut, class D, class V>
HWY_INLINE void probe_params(D d, float* HWY_RESTRICT p, V g, uint16_t* HWY_RESTRICT out) {
  const auto vp = hn::Add(hn::LoadU(d, p), g);
  hn::StoreU(vp, d, p);
  if constexpr (kOut != CopyOut::kNone) {
    // Truncation, not rounding: the probe only needs the 2-byte store.
    const hn::RebindToUnsigned<D> du;
    const hn::RebindToSigned<D> di;
    const hn::Rebind<uint16_t, D> d16;
    const auto hi = hn::ShiftRight<16>(hn::BitCast(du, vp));
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, hi)), d16, out);
  }
}

// The streaming probes' block: the loads and stores of the Adam kernel (read p, g, m, v;
// write p, m, v and the 16-bit copy), one add per stream, next to no arithmetic.
template <CopyOut kOut, class D>
HWY_INLINE void probe_block(D d, float* HWY_RESTRICT p, const float* HWY_RESTRICT g,
                            float* HWY_RESTRICT m, float* HWY_RESTRICT v,
                            uint16_t* HWY_RESTRICT out) {
  const auto vg = hn::LoadU(d, g);
  hn::StoreU(hn::Add(hn::LoadU(d, m), vg), d, m);
  hn::StoreU(hn::Add(hn::LoadU(d, v), vg), d, v);
  probe_params<kOut>(d, p, vg, out);
}

// probe_block with compressed states: m and v are T (uint16_t: bf16 states, 2 bytes each way;
// uint8_t: int8 codes, 1 byte each way), read and written with one integer op each
// (m += v, v -= old m, wrapping). With the bf16 copy-out that is the fused compressed kernels'
// traffic: 22 bytes per element (bf16 states), 18 (int8; the block scales, 16 bytes per 2048
// elements, are left out).
template <class T, class D>
HWY_INLINE void probe_states_block(D d, float* HWY_RESTRICT p, const float* HWY_RESTRICT g,
                                   T* HWY_RESTRICT m, T* HWY_RESTRICT v,
                                   uint16_t* HWY_RESTRICT out) {
  const hn::Rebind<T, D> dt;
  const auto vm = hn::LoadU(dt, m);
  const auto vv = hn::LoadU(dt, v);
  hn::StoreU(hn::Add(vm, vv), dt, m);
  hn::StoreU(hn::Sub(vv, vm), dt, v);
  probe_params<CopyOut::kBf16>(d, p, hn::LoadU(d, g), out);
}

}  // namespace HWY_NAMESPACE
}  // namespace optim
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
