// Gathers gradients as backward produces them and reduces them across ranks, bucket by bucket.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <mutex>
#include <vector>

#include "zoff/dist/comm.h"
#include "zoff/partition/flat_buffer.h"
#include "zoff/partition/flat_layout.h"

namespace zoff::engine {

// How gradients are kept and reduced (ZeRO stage semantics):
// - kAllReduce (stage 0): every rank keeps the full gradient buffer; all-reduce.
// - kReduceScatterAtBoundary (stage 1): full gradient buffer during accumulation; at the
//   accumulation boundary each bucket is reduce-scattered and a rank keeps its shard.
// - kReduceScatterEveryMicroBatch (stage 2): no full gradient buffer. Each parameter's
//   gradient is copied into a bucket and freed; full buckets are reduce-scattered at once,
//   asynchronously, while backward goes on; the shard accumulates over micro-batches.
enum class GradMode { kAllReduce, kReduceScatterAtBoundary, kReduceScatterEveryMicroBatch };

struct GradReducerOptions {
  GradMode mode = GradMode::kAllReduce;
  int64_t bucket_elems = 500000000;  // zero_optimization.reduce_bucket_size
  // Launch a bucket's collective as soon as it is complete (overlapping the rest of
  // backward); otherwise all collectives start after backward.
  bool overlap = true;
  // Where the fp32 gradient shard lives (stages 1, 2): the offload tier (host) with
  // offload_optimizer, else the compute device.
  torch::Device shard_device = torch::kCPU;
  bool pin_memory = false;  // page-locked shard when the compute device is a GPU
};

class GradReducer {
 public:
  // `params` in module order. Gradients keep the parameters' dtype while they are full
  // (stages 0, 1) and are reduced in fp32 whatever that dtype (Gloo cannot sum 16-bit
  // types; the sum is exact-order fp32 either way).
  GradReducer(const partition::FlatLayout& layout, std::vector<torch::Tensor> params,
              dist::CommPtr comm, GradReducerOptions options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Call before each micro-batch's backward; `boundary` is true for the last micro-batch
  // of an accumulation (when stages 0 and 1 communicate).
  void begin_backward(bool boundary);
  // Call after backward returns: launches what is left and waits for every collective.
  void end_backward();

  // The reduced gradient (a sum over ranks, not yet averaged) of this rank's part:
  // stage 0: the whole padded flat buffer; stages 1, 2: this rank's shard. fp32, 1-D.
  torch::Tensor reduced_grads();
  // Zeroes the kept gradients after the optimizer step.
  void zero_grads();

  // Bytes of gradients kept on the compute device (the full 16-bit or fp32 buffer of
  // stages 0, 1) and in the shard tier (the fp32 shard of stages 1, 2 when it is not a
  // view of the full buffer; stage 0's fp32 sum of 16-bit gradients).
  size_t full_grad_bytes() const;
  size_t shard_grad_bytes() const;
  size_t buffer_bytes() const;  // bucket staging and receive buffers ever allocated
  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Pending;  // a collective in flight and where its result goes
  void on_grad_ready(size_t slot);
  void launch(size_t bucket);
  void drain_one();
  torch::Tensor acquire_staging();

  const partition::FlatLayout& layout_;
  std::vector<torch::Tensor> params_;
  dist::CommPtr comm_;
  GradMode mode_;
  bool overlap_;
  torch::Device shard_device_;
  partition::Shard shard_;
  std::vector<partition::Bucket> buckets_;
  std::vector<size_t> slot_bucket_;  // slot -> bucket
  std::vector<int> bucket_ready_;    // grads arrived this backward
  std::vector<bool> bucket_launched_;
  std::vector<torch::Tensor> bucket_staging_;  // stage 2: per-bucket staging (while filling)
  std::unique_ptr<partition::FlatBuffer> full_grads_;  // stages 0, 1 (parameter dtype)
  // The fp32 result: stage 0 with 16-bit gradients: the whole padded sum; stages 1, 2:
  // this rank's shard (for fp32 stage 1 on one device, a view into full_grads_).
  torch::Tensor reduced_;
  size_t reduced_owned_bytes_ = 0;
  std::vector<torch::Tensor> free_staging_;
  std::vector<std::unique_ptr<Pending>> in_flight_;
  int64_t max_bucket_ = 0;
  size_t staging_allocated_ = 0;  // elements ever allocated for staging + receive
  bool active_ = false;
  bool boundary_ = false;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::mutex mutex_;
};

}  // namespace zoff::engine
