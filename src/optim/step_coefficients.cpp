// Per-step constants of each optimizer, computed in double as LibTorch does, rounded once.
#include <cmath>

#include "zoff/optim/kernels.h"

namespace zoff::optim {

AdamCoefficients adam_coefficients(const OptimizerOptions& o, double lr, int64_t t) {
  const double bias_correction1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
  const bool decoupled = o.type == "adamw";
  AdamCoefficients c;
  c.beta1 = static_cast<float>(o.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
  c.beta2 = static_cast<float>(o.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
  c.step_size = static_cast<float>(lr / bias_correction1);
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  c.eps = static_cast<float>(o.eps);
  c.decay = decoupled ? static_cast<float>(1.0 - lr * o.weight_decay) : 1.0f;
  c.l2 = decoupled ? 0.0f : static_cast<float>(o.weight_decay);
  return c;
}

SgdCoefficients sgd_coefficients(const OptimizerOptions& o, double lr, int64_t t) {
  SgdCoefficients c;
  c.lr = static_cast<float>(lr);
  c.weight_decay = static_cast<float>(o.weight_decay);
  c.momentum = static_cast<float>(o.momentum);
  c.one_minus_dampening = static_cast<float>(1.0 - o.dampening);
  c.nesterov = o.nesterov;
  c.first_step = t == 1;
  return c;
}

AdagradCoefficients adagrad_coefficients(const OptimizerOptions& o, double lr, int64_t t) {
  AdagradCoefficients c;
  c.clr = static_cast<float>(lr / (1.0 + static_cast<double>(t - 1) * o.lr_decay));
  c.weight_decay = static_cast<float>(o.weight_decay);
  c.eps = static_cast<float>(o.eps);
  return c;
}

}  // namespace zoff::optim
