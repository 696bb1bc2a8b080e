// Fused Adam / AdamW over bf16 and int8 states, compiled per SIMD target by Highway.
//
// The update is adam_update (kernel_lanes-inl.h), the fp32 kernel's own math; only the loads
// and stores of m and v differ. Tails shorter than a vector run on one-lane vectors of the
// same target, so the result of an element does not depend on where a span is cut.
#undef HWY_TARGET_INCLUDE
// Resolved against the include path (<repo>/include), as in fused_kernels.cpp.
#define HWY_TARGET_INCLUDE "../src/optim/compressed_adam_kernels.cpp"
// The same targets as fused_kernels.cpp (simd_dispatch.cpp forces levels by these bits).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#endif
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernel_lanes-inl.h"
#include "simd_targets.h"
#include "zoff/optim/compressed_adam.h"

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

// Decoders and encoders of state_dtype.h, lane by lane, with the same operations in the same
// order as decode_signed / encode_signed / decode_unsigned / encode_unsigned.
template <class D>
HWY_INLINE hn::Vec<D> decode_signed_lanes(D d, const int8_t* HWY_RESTRICT q, float scale) {
  const hn::Rebind<int8_t, D> d8;
  const hn::RebindToSigned<D> di;
  const auto r =
      hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q))), hn::Set(d, kInvSignedMax));
  return hn::Mul(hn::Mul(r, hn::Abs(r)), hn::Set(d, scale));
}

template <class D>
HWY_INLINE hn::Vec<D> decode_unsigned_lanes(D d, const uint8_t* HWY_RESTRICT q, float scale) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::RebindToSigned<D> di;
  const auto r =
      hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q))), hn::Set(d, kInvUnsignedMax));
  const auto r2 = hn::Mul(r, r);
  return hn::Mul(hn::Mul(r2, r2), hn::Set(d, scale));
}

// Round to nearest even of y in [0, max] (NaN and above saturate to max): adding and
// subtracting 2^23 leaves no fraction bits, so the FPU's rounding of the sum is the rounding.
template <class D>
HWY_INLINE hn::Vec<D> round_code(D d, hn::Vec<D> y, float max) {
  const auto top = hn::Set(d, max);
  y = hn::IfThenElse(hn::Le(y, top), y, top);
  const auto shift = hn::Set(d, 8388608.0f);  // 2^23
  return hn::Sub(hn::Add(y, shift), shift);
}

template <class D>
HWY_INLINE void encode_signed_lanes(D d, hn::Vec<D> x, float inv_scale, int8_t* HWY_RESTRICT q) {
  const hn::Rebind<int8_t, D> d8;
  const hn::RebindToSigned<D> di;
  const auto scaled = hn::Mul(x, hn::Set(d, inv_scale));
  const auto r = round_code(d, hn::Mul(hn::Sqrt(hn::Abs(scaled)), hn::Set(d, 127.0f)), 127.0f);
  hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, hn::CopySign(r, scaled))), d8, q);
}

template <class D>
HWY_INLINE void encode_unsigned_lanes(D d, hn::Vec<D> x, float inv_scale, uint8_t* HWY_RESTRICT q) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::RebindToSigned<D> di;
  const auto root = hn::Sqrt(hn::Sqrt(hn::Mul(x, hn::Set(d, inv_scale))));
  const auto r = round_code(d, hn::Mul(root, hn::Set(d, 255.0f)), 255.0f);
  hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, q);
}

// Largest |x| of n floats with NaN ignored: acc < a ? a : acc per lane, then the lanes in
// the same way. The maximum of the non-NaN values does not depend on the order of the folds.
HWY_INLINE float absmax(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  auto acc = hn::Zero(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto a = hn::Abs(hn::LoadU(d, x + i));
    acc = hn::IfThenElse(hn::Lt(acc, a), a, acc);
  }
  HWY_ALIGN float folded[hn::MaxLanes(d)];
  hn::Store(acc, d, folded);
  float s = 0.0f;
  for (size_t k = 0; k < lanes; ++k) s = s < folded[k] ? folded[k] : s;
  for (; i < n; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    s = s < a ? a : s;
  }
  return s;
}

// One int8 block of n <= kStateBlock elements starting at element `begin` of the span.
template <CopyOut kOut>
HWY_INLINE void adam_int8_block(const AdamCoefficients& c, float* p, const float* g,
                                const Int8AdamStates& s, size_t block, size_t begin, size_t n,
                                uint16_t* out) {
  HWY_ALIGN float m_new[kStateBlock];  // this block's updated m and v, fp32 (L1-resident)
  HWY_ALIGN float v_new[kStateBlock];
  const float m_scale = s.exp_avg_scales[block];
  const float v_scale = s.exp_avg_sq_scales[block];
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    const size_t k = begin + i;
    auto vp = hn::LoadU(d, p + k);
    auto vm = decode_signed_lanes(d, s.exp_avg + k, m_scale);
    auto vv = decode_unsigned_lanes(d, s.exp_avg_sq + k, v_scale);
    adam_update(d, c, vp, hn::LoadU(d, g + k), vm, vv);
    hn::StoreU(vm, d, m_new + i);
    hn::StoreU(vv, d, v_new + i);
    hn::StoreU(vp, d, p + k);
    store_out16<kOut>(d, vp, kOut == CopyOut::kNone ? nullptr : out + k);
  });
  s.exp_avg_scales[block] = absmax(m_new, n);
  s.exp_avg_sq_scales[block] = absmax(v_new, n);
  const float m_inv = block_inv_scale(s.exp_avg_scales[block]);
  const float v_inv = block_inv_scale(s.exp_avg_sq_scales[block]);
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    encode_signed_lanes(d, hn::LoadU(d, m_new + i), m_inv, s.exp_avg + begin + i);
    encode_unsigned_lanes(d, hn::LoadU(d, v_new + i), v_inv, s.exp_avg_sq + begin + i);
  });
}

template <CopyOut kOut>
HWY_NOINLINE void adam_bf16_loop(const AdamCoefficients& c, float* p, const float* g, uint16_t* m,
                                 uint16_t* v, size_t n, uint16_t* out) {
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    adam_bf16_lanes<kOut>(d, c, p + i, g + i, m + i, v + i,
                          kOut == CopyOut::kNone ? nullptr : out + i);
  });
}

template <CopyOut kOut>
HWY_NOINLINE void adam_int8_loop(const AdamCoefficients& c, float* p, const float* g,
                                 const Int8AdamStates& s, size_t n, uint16_t* out) {
  for (size_t block = 0, begin = 0; begin < n; ++block, begin += kStateBlock) {
    adam_int8_block<kOut>(c, p, g, s, block, begin, std::min(kStateBlock, n - begin), out);
  }
}

// Per-target entry points (the dispatch tables below point at these).
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

void AdamInt8StatesKernel(const AdamCoefficients& c, float* p, const float* g,
                          const Int8AdamStates& s, size_t n, CopyOut copy_out, uint16_t* out) {
  switch (copy_out) {
    case CopyOut::kNone:
      return adam_int8_loop<CopyOut::kNone>(c, p, g, s, n, out);
    case CopyOut::kBf16:
      return adam_int8_loop<CopyOut::kBf16>(c, p, g, s, n, out);
    case CopyOut::kFp16:
      return adam_int8_loop<CopyOut::kFp16>(c, p, g, s, n, out);
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
