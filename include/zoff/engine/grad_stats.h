// The step's gradient statistics across ranks: the fp16 overflow vote, the global norm's sum
// of squares in rank order, and clipping's coefficient.
#pragma once

#include <torch/torch.h>

#include "zoff/dist/comm.h"

namespace zoff::engine {

// True when any rank's `grads` hold an Inf or NaN: every rank sees a different shard, so all
// agree on the verdict and skip together. Collective.
bool any_rank_overflowed(dist::Comm& comm, const torch::Tensor& grads);

// The sum of every rank's `local` squares, added in rank order: the fp64 sums of exact
// squares are not exact, so a transport's own all-reduce order (Gloo's ring) would change the
// norm's last bits; gathering one number per rank costs the same as reducing it. Collective.
double sum_in_rank_order(dist::Comm& comm, double local);

// The flat fp32 gradient the step reads, as the raw span the gradient kernels take; anything
// else (another dtype, strided, on a device) throws zoff::Error naming it.
float* gradient_span(const torch::Tensor& grads);

// torch::nn::utils::clip_grad_norm_'s coefficient for `norm` and `max_norm` (> 0): below 1
// the gradients are multiplied by it.
inline double clip_coefficient(double max_norm, double norm) { return max_norm / (norm + 1e-6); }

}  // namespace zoff::engine
