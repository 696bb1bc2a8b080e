// LibTorch's Adam/AdamW stepped by ATen's fused CPU kernel: what torch.optim.AdamW(fused=True)
// runs, for the C++ reference (`zoff train --reference`).
#pragma once

#include <torch/optim.h>
#include <torch/torch.h>

namespace zoff::optim {

// torch::optim::AdamW whose step() calls at::_fused_adamw_ (ATen's FusedAdamKernel) on the
// parameters that have gradients, with the same per-parameter state (exp_avg, exp_avg_sq,
// step). Why: in PyTorch 2.x torch::optim::AdamW takes sqrt of the second moments through
// MKL's vector math, an ulp off in ~20% of elements, while the fused kernel (and zoff's)
// rounds it correctly; a reference that differs from zoff in every step's last bits turns a
// chaotic model's exactness check into noise. amsgrad is not supported (zoff has none).
class TorchFusedAdamW final : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

// The same for Adam (L2 weight decay added to the gradient): at::_fused_adam_.
class TorchFusedAdam final : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace zoff::optim
