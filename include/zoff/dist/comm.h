// The collectives zoff needs, on flat contiguous tensors, behind a small interface.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace zoff::dist {

// A collective in flight. wait() blocks until it is done or the timeout passes; on
// timeout (or a peer failure) it throws zoff::Error naming the operation.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // True once wait() would return at once.
  virtual bool done() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// Data-parallel communicator. All tensors are contiguous and on the same device; the
// element counts below are per call and must agree across ranks. Reductions are sums.
// Every call is asynchronous and returns Work; the caller must keep the tensors alive
// until wait() returns.
class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: tensor <- sum over ranks of tensor. fp32/fp64/int types (Gloo cannot
  // reduce bf16/fp16: the caller reduces in fp32).
  virtual WorkPtr all_reduce_sum(torch::Tensor tensor) = 0;

  // input has size() * output.numel() elements; rank r receives in output the sum over
  // ranks of input[r * n, (r + 1) * n) with n = output.numel().
  virtual WorkPtr reduce_scatter_sum(torch::Tensor input, torch::Tensor output) = 0;

  // Uneven reduce-scatter. input is split into size() consecutive pieces of
  // split_sizes[0], split_sizes[1], ... elements (same split on every rank); rank r
  // receives in output (split_sizes[r] elements) the sum over ranks of piece r. Pieces
  // may be empty: a bucket lying inside one rank's shard is a plain reduce to that rank.
  virtual WorkPtr reduce_scatter_sum_v(torch::Tensor input, std::vector<int64_t> split_sizes,
                                       torch::Tensor output) = 0;

  // output has size() * input.numel() elements; output[r * n, (r + 1) * n) <- rank r's
  // input. Any dtype (moves raw elements).
  virtual WorkPtr all_gather(torch::Tensor input, torch::Tensor output) = 0;

  // In place: tensor <- root's tensor. Any dtype.
  virtual WorkPtr broadcast(torch::Tensor tensor, int root) = 0;

  // Blocks until every rank has reached it (with the timeout).
  virtual void barrier() = 0;

  // Collective: a zero-filled tensor of `numel` elements of `dtype` whose memory every rank
  // maps (the same pages, not copies), for data the ranks of one host can hold once, such as
  // the 16-bit parameters at stages 1-2. A write by one rank is seen by all; the callers
  // order their writes and reads with barrier(). Returns an undefined tensor, with the
  // reason in *why_not (may be null), when the ranks share no memory (the default: Gloo,
  // a single rank) or the memory cannot be had; every rank gets the same answer.
  virtual torch::Tensor shared_tensor(int64_t numel, torch::ScalarType dtype,
                                      std::string* why_not) {
    (void)numel;
    (void)dtype;
    if (why_not != nullptr) *why_not = "the " + backend() + " transport shares no memory";
    return {};
  }

  // Human-readable backend name, e.g. "gloo" or "single".
  virtual std::string backend() const = 0;
};
using CommPtr = std::shared_ptr<Comm>;

}  // namespace zoff::dist
