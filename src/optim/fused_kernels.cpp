// Fused optimizer kernels, compiled once per SIMD target by Highway and dispatched at run time.
//
// Each kernel makes one pass over memory: it loads p, g and the state of a block of lanes,
// updates them in registers, stores them, and (optionally) stores p as bf16/fp16 too. The
// tail shorter than a full vector runs the same code on one-lane vectors of the same target,
// so every element gets bit-identical arithmetic however the span is split among threads.
// First: it sets the SIMD targets every kernel file compiles, before Highway is included.
#include "simd_targets.h"
#undef HWY_TARGET_INCLUDE
// foreach_target.h re-includes this file once per target; the path is resolved against the
// include path (<repo>/include), which is the only one this file can count on.
#define HWY_TARGET_INCLUDE "../src/optim/fused_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>

#include "kernel_lanes-inl.h"
#include "zoff/optim/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace zoff {
namespace optim {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Adam / AdamW on Lanes(d) elements (the math and its rounding order: adam_update).
template <CopyOut kOut, class D>
HWY_INLINE void adam_block(D d, const AdamCoefficients& c, float* HWY_RESTRICT p,
                           const float* HWY_RESTRICT g, float* HWY_RESTRICT m,
                           float* HWY_RESTRICT v, uint16_t* HWY_RESTRICT out) {
  auto vp = hn::LoadU(d, p);
  auto vm = hn::LoadU(d, m);
  auto vv = hn::LoadU(d, v);
  adam_update(d, c, vp, hn::LoadU(d, g), vm, vv);
  hn::StoreU(vm, d, m);
  hn::StoreU(vv, d, v);
  hn::StoreU(vp, d, p);
  store_out16<kOut>(d, vp, out);
}

// SGD on Lanes(d) elements (see SgdCoefficients).
template <CopyOut kOut, class D>
HWY_INLINE void sgd_block(D d, const SgdCoefficients& c, float* HWY_RESTRICT p,
                          const float* HWY_RESTRICT g, float* HWY_RESTRICT buf,
                          uint16_t* HWY_RESTRICT out) {
  auto vp = hn::LoadU(d, p);
  auto step = hn::LoadU(d, g);
  if (c.weight_decay != 0.0f) step = fmadd(d, vp, hn::Set(d, c.weight_decay), step);
  if (c.momentum != 0.0f) {
    const auto momentum = hn::Set(d, c.momentum);
    const auto vb = c.first_step ? step
                                 : fmadd(d, step, hn::Set(d, c.one_minus_dampening),
                                         hn::Mul(hn::LoadU(d, buf), momentum));
    hn::StoreU(vb, d, buf);
    step = c.nesterov ? fmadd(d, vb, momentum, step) : vb;
  }
  vp = fmadd(d, step, hn::Set(d, -c.lr), vp);
  hn::StoreU(vp, d, p);
  store_out16<kOut>(d, vp, out);
}

// Adagrad on Lanes(d) elements (see AdagradCoefficients).
template <CopyOut kOut, class D>
HWY_INLINE void adagrad_block(D d, const AdagradCoefficients& c, float* HWY_RESTRICT p,
                              const float* HWY_RESTRICT g, float* HWY_RESTRICT sum,
                              uint16_t* HWY_RESTRICT out) {
  auto vp = hn::LoadU(d, p);
  auto vg = hn::LoadU(d, g);
  if (c.weight_decay != 0.0f) vg = fmadd(d, vp, hn::Set(d, c.weight_decay), vg);
  const auto vs = fmadd(d, vg, vg, hn::LoadU(d, sum));  // sum.addcmul_(g, g, 1)
  const auto std_dev = hn::Add(hn::Sqrt(vs), hn::Set(d, c.eps));
  vp = hn::Add(vp, hn::Div(hn::Mul(hn::Set(d, -c.clr), vg), std_dev));
  hn::StoreU(vs, d, sum);
  hn::StoreU(vp, d, p);
  store_out16<kOut>(d, vp, out);
}

// Copies Lanes(d) floats to 16 bits.
template <CopyOut kOut, class D>
HWY_INLINE void convert_block(D d, const float* HWY_RESTRICT src, uint16_t* HWY_RESTRICT out) {
  store_out16<kOut>(d, hn::LoadU(d, src), out);
}

template <CopyOut kOut>
HWY_NOINLINE void adam_loop(const AdamCoefficients& coefficients, float* p, const float* g,
                            float* m, float* v, size_t n, uint16_t* out) {
  // A local: the compiler cannot tell that stores to p, m, v leave a reference's fields
  // alone, and reloaded and re-broadcast every coefficient on every vector.
  const AdamCoefficients c = coefficients;
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    adam_block<kOut>(d, c, p + i, g + i, m + i, v + i, kOut == CopyOut::kNone ? nullptr : out + i);
  });
}

template <CopyOut kOut>
HWY_NOINLINE void sgd_loop(const SgdCoefficients& coefficients, float* p, const float* g,
                           float* buf, size_t n, uint16_t* out) {
  const SgdCoefficients c = coefficients;  // a local, as in adam_loop
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    sgd_block<kOut>(d, c, p + i, g + i, c.momentum != 0.0f ? buf + i : nullptr,
                    kOut == CopyOut::kNone ? nullptr : out + i);
  });
}

template <CopyOut kOut>
HWY_NOINLINE void adagrad_loop(const AdagradCoefficients& coefficients, float* p, const float* g,
                               float* sum, size_t n, uint16_t* out) {
  const AdagradCoefficients c = coefficients;  // a local, as in adam_loop
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    adagrad_block<kOut>(d, c, p + i, g + i, sum + i, kOut == CopyOut::kNone ? nullptr : out + i);
  });
}

template <CopyOut kOut>
HWY_NOINLINE void convert_loop(const float* src, size_t n, uint16_t* out) {
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR { convert_block<kOut>(d, src + i, out + i); });
}

template <CopyOut kOut>
HWY_NOINLINE void probe_loop(float* p, const float* g, float* m, float* v, size_t n,
                             uint16_t* out) {
  for_each_block(n, [&](auto d, size_t i) HWY_ATTR {
    probe_block<kOut>(d, p + i, g + i, m + i, v + i, kOut == CopyOut::kNone ? nullptr : out + i);
  });
}

// Per-target entry points (the dispatch tables below point at these).
void AdamKernel(const AdamCoefficients& c, float* p, const float* g, float* m, float* v, size_t n,
                CopyOut copy_out, uint16_t* out) {
  switch (copy_out) {
    case CopyOut::kNone:
      return adam_loop<CopyOut::kNone>(c, p, g, m, v, n, out);
    case CopyOut::kBf16:
      return adam_loop<CopyOut::kBf16>(c, p, g, m, v, n, out);
    case CopyOut::kFp16:
      return adam_loop<CopyOut::kFp16>(c, p, g, m, v, n, out);
  }
}

void SgdKernel(const SgdCoefficients& c, float* p, const float* g, float* buf, size_t n,
               CopyOut copy_out, uint16_t* out) {
  switch (copy_out) {
    case CopyOut::kNone:
      return sgd_loop<CopyOut::kNone>(c, p, g, buf, n, out);
    case CopyOut::kBf16:
      return sgd_loop<CopyOut::kBf16>(c, p, g, buf, n, out);
    case CopyOut::kFp16:
      return sgd_loop<CopyOut::kFp16>(c, p, g, buf, n, out);
  }
}

void AdagradKernel(const AdagradCoefficients& c, float* p, const float* g, float* sum, size_t n,
                   CopyOut copy_out, uint16_t* out) {
  switch (copy_out) {
    case CopyOut::kNone:
      return adagrad_loop<CopyOut::kNone>(c, p, g, sum, n, out);
    case CopyOut::kBf16:
      return adagrad_loop<CopyOut::kBf16>(c, p, g, sum, n, out);
    case CopyOut::kFp16:
      return adagrad_loop<CopyOut::kFp16>(c, p, g, sum, n, out);
  }
}

void ConvertKernel(const float* src, size_t n, CopyOut format, uint16_t* out) {
  switch (format) {
    case CopyOut::kNone:
      return;
    case CopyOut::kBf16:
      return convert_loop<CopyOut::kBf16>(src, n, out);
    case CopyOut::kFp16:
      return convert_loop<CopyOut::kFp16>(src, n, out);
  }
}

void ProbeKernel(float* p, const float* g, float* m, float* v, size_t n, uint16_t* out) {
  if (out == nullptr) return probe_loop<CopyOut::kNone>(p, g, m, v, n, out);
  probe_loop<CopyOut::kBf16>(p, g, m, v, n, out);
}

const char* TargetNameKernel() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace optim
}  // namespace zoff
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace zoff::optim {

HWY_EXPORT(AdamKernel);
HWY_EXPORT(SgdKernel);
HWY_EXPORT(AdagradKernel);
HWY_EXPORT(ConvertKernel);
HWY_EXPORT(ProbeKernel);
HWY_EXPORT(TargetNameKernel);

void fused_adam(const AdamCoefficients& c, float* params, const float* grads, float* exp_avg,
                float* exp_avg_sq, size_t n, CopyOut copy_out, uint16_t* out16) {
  detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(AdamKernel)(c, params, grads, exp_avg, exp_avg_sq, n, copy_out, out16);
}

void fused_sgd(const SgdCoefficients& c, float* params, const float* grads, float* momentum_buffer,
               size_t n, CopyOut copy_out, uint16_t* out16) {
  detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(SgdKernel)(c, params, grads, momentum_buffer, n, copy_out, out16);
}

void fused_adagrad(const AdagradCoefficients& c, float* params, const float* grads, float* sum,
                   size_t n, CopyOut copy_out, uint16_t* out16) {
  detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(AdagradKernel)(c, params, grads, sum, n, copy_out, out16);
}

void fused_convert(const float* src, size_t n, CopyOut format, uint16_t* out16) {
  detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(ConvertKernel)(src, n, format, out16);
}

void stream_probe(float* p, const float* g, float* m, float* v, size_t n, uint16_t* out16) {
  detail::ensure_simd_env_applied();
  HWY_DYNAMIC_DISPATCH(ProbeKernel)(p, g, m, v, n, out16);
}

namespace detail {
int64_t compiled_simd_targets() { return HWY_TARGETS; }
std::string dispatched_target_name() {
  ensure_simd_env_applied();
  return HWY_DYNAMIC_DISPATCH(TargetNameKernel)();
}
}  // namespace detail

}  // namespace zoff::optim
#endif  // HWY_ONCE
