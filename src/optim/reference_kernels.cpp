// Plain scalar references of the optimizer kernels: one simple loop each, rounding step by step
// as PyTorch's CPU optimizers do (std::fma where ATen computes a fused a * b + c).
#include <cmath>

#include "zoff/optim/kernels.h"

namespace zoff::optim {
void reference_copy_out(float p, CopyOut copy_out, uint16_t* out) {
  if (copy_out == CopyOut::kBf16) *out = float_to_bf16(p);
  if (copy_out == CopyOut::kFp16) *out = float_to_fp16(p);
}

void reference_adam(const AdamCoefficients& c, float* params, const float* grads, float* exp_avg,
                    float* exp_avg_sq, size_t n, CopyOut copy_out, uint16_t* out16) {
  for (size_t i = 0; i < n; ++i) {
    float p = params[i] * c.decay;  // AdamW: p.mul_(1 - lr wd)
    float g = grads[i];
    if (c.l2 != 0.0f) g = std::fma(p, c.l2, g);  // Adam: grad.add(p, wd)
    const float m = std::fma(c.one_minus_beta1, g - exp_avg[i], exp_avg[i]);  // lerp(m, g, 1 - b1)
    const float v = std::fma(c.one_minus_beta2 * g, g, exp_avg_sq[i] * c.beta2);
    const float denom = std::sqrt(v) / c.bias_correction2_sqrt + c.eps;
    p = p + (-c.step_size * m) / denom;  // p.addcdiv_(m, denom, -step_size)
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    params[i] = p;
    if (copy_out != CopyOut::kNone) reference_copy_out(p, copy_out, out16 + i);
  }
}

void reference_sgd(const SgdCoefficients& c, float* params, const float* grads,
                   float* momentum_buffer, size_t n, CopyOut copy_out, uint16_t* out16) {
  for (size_t i = 0; i < n; ++i) {
    float d = grads[i];
    if (c.weight_decay != 0.0f) d = std::fma(params[i], c.weight_decay, d);
    if (c.momentum != 0.0f) {
      float buf = d;  // the first step initialises the buffer to d
      if (!c.first_step) buf = std::fma(d, c.one_minus_dampening, momentum_buffer[i] * c.momentum);
      momentum_buffer[i] = buf;
      d = c.nesterov ? std::fma(buf, c.momentum, d) : buf;
    }
    params[i] = std::fma(d, -c.lr, params[i]);
    if (copy_out != CopyOut::kNone) reference_copy_out(params[i], copy_out, out16 + i);
  }
}

void reference_adagrad(const AdagradCoefficients& c, float* params, const float* grads, float* sum,
                       size_t n, CopyOut copy_out, uint16_t* out16) {
  for (size_t i = 0; i < n; ++i) {
    float g = grads[i];
    if (c.weight_decay != 0.0f) g = std::fma(params[i], c.weight_decay, g);
    sum[i] = std::fma(g, g, sum[i]);
    const float std_dev = std::sqrt(sum[i]) + c.eps;
    params[i] = params[i] + (-c.clr * g) / std_dev;
    if (copy_out != CopyOut::kNone) reference_copy_out(params[i], copy_out, out16 + i);
  }
}

}  // namespace zoff::optim
