// LayerNorm of bf16 activations in one pass each way: fp32 arithmetic, no widened copies.
#pragma once

#include <torch/torch.h>

namespace zoff::models {

// LayerNorm over the last dimension of a bf16 tensor, computed in fp32 and rounded once to
// bf16: what widening x, fp32 layer_norm and rounding back compute (torch.autocast's
// LayerNorm on CPU), without the three fp32 copies per call and their backward. Results
// differ from that path only by the order of the fp32 sums (a bf16 ulp in a few elements
// per million, see the tests). weight and bias: bf16 or fp32, last-dimension sized;
// differentiable in x, weight and bias (their gradients in their own dtypes). Rows run in
// parallel on LibTorch's intra-op threads; results do not depend on their number.
torch::Tensor fused_layer_norm(const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, double eps);

}  // namespace zoff::models
