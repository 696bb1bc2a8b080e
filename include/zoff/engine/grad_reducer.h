// Gathers gradients as backward produces them and reduces them across ranks, bucket by bucket.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "zoff/core/device_transfer.h"
#include "zoff/dist/comm.h"
#include "zoff/partition/flat_buffer.h"
#include "zoff/partition/model_layout.h"

namespace zoff::engine {

// How gradients are kept and reduced (ZeRO stage semantics):
// - kAllReduce (stage 0): every rank keeps the full fp32 gradient buffer; all-reduce.
// - kReduceScatterAtBoundary (stage 1): full fp32 gradient buffer during accumulation; at
//   the accumulation boundary each bucket is reduce-scattered and a rank keeps its shard.
// - kReduceScatterEveryMicroBatch (stages 2, 3): no full gradient buffer. Each parameter's
//   gradient is copied into its bucket and freed; full buckets are reduce-scattered at
//   once, asynchronously, while backward goes on; the fp32 shard accumulates micro-batches.
// Micro-batches accumulate in fp32 at every stage, whatever the compute dtype.
enum class GradMode { kAllReduce, kReduceScatterAtBoundary, kReduceScatterEveryMicroBatch };

struct GradReducerOptions {
  GradMode mode = GradMode::kAllReduce;
  int64_t bucket_elems = 500000000;  // zero_optimization.reduce_bucket_size
  bool unit_buckets = false;         // one bucket per unit (stage 3)
  // Launch a bucket's collective as soon as it is complete (overlapping the rest of
  // backward); otherwise all collectives start after backward.
  bool overlap = true;
  // Where the fp32 gradient shard lives (stages 1-3): the offload tier (host) with
  // offload_optimizer, else the compute device.
  torch::Device shard_device = torch::kCPU;
  bool pin_memory = false;  // page-locked shard when the compute device is a GPU
  // Called (on the backward thread) once every trainable parameter of a unit has its
  // gradient for this backward and the gradients were copied out (stage 3 releases it).
  std::function<void(size_t unit)> on_unit_done;
  // Stages 1-3, last micro-batch of an accumulation: called once per bucket as soon as
  // its reduced sum is final in the shard, with the bucket's shard range (offset, size in
  // elements), on the thread that drained it. When set, finished collectives are drained
  // while backward goes on, not only at its end: the optimizer step overlaps backward
  // through this.
  std::function<void(int64_t shard_offset, int64_t size)> on_shard_final;
  // Stages 2, 3: where the fp32 shard accumulates when not in memory (the nvme tier). Each
  // reduced bucket's shard range goes to the sink instead of being added into an owned
  // shard tensor: `first` is true for the first micro-batch since zero_grads() (replace,
  // not add). reduced_grads() is then undefined. Called before on_shard_final, on the
  // thread that drained the bucket, one call at a time.
  std::function<void(int64_t shard_offset, const torch::Tensor& piece, bool first)> shard_sink;
  // Stages 2, 3: the dtype of the staging buffers each micro-batch's reduce-scatter sends,
  // the gradients' own dtype. Every element of a staging buffer holds one gradient, never a
  // sum, so a 16-bit compute dtype travels as is (half the bytes of fp32) and the Comm
  // widens and sums it in fp32 in rank order: the reduced shard is bitwise the one an fp32
  // staging buffer gives.
  torch::ScalarType staging_dtype = torch::kFloat32;
  // Parameters on an accelerator: the buckets' staging buffers live in host memory (the
  // collectives run over host transports), and `transfer` copies each gradient there on
  // its side stream as soon as backward produced it; a bucket's collective starts once
  // its copies have landed (page-locked with pin_memory: asynchronous copies). nullptr:
  // plain copies.
  bool stage_on_host = false;
  DeviceTransfer* transfer = nullptr;
};

class GradReducer {
 public:
  // `params`: the trainable parameters, indexed like ModelLayout's slots' module_index.
  // Sums run in fp32 (Gloo cannot sum 16-bit types).
  GradReducer(const partition::ModelLayout& layout, std::vector<torch::Tensor> params,
              dist::CommPtr comm, GradReducerOptions options);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Call before each micro-batch's backward; `boundary` is true for the last micro-batch
  // of an accumulation (when stages 0 and 1 communicate).
  void begin_backward(bool boundary);
  // Call after backward returns: launches what is left and waits for every collective.
  void end_backward();
  // After a backward that threw: waits for collectives in flight and forgets its state.
  void abort_backward();

  // The reduced gradient (a sum over ranks, not yet averaged), fp32, 1-D: stage 0 the
  // whole padded flat buffer, stages 1-3 this rank's shard space; undefined with a
  // shard_sink.
  torch::Tensor reduced_grads();
  // Zeroes the kept gradients after the optimizer step. The owned shard of stages 2, 3 is not
  // cleared: the next backward's first reduction writes every bucket's range of it anew.
  void zero_grads();

  // Bytes of gradients kept on the compute device (stages 0, 1: the full fp32 buffer) and
  // in the shard tier (the fp32 shard when it is not part of the full buffer).
  size_t full_grad_bytes() const;
  size_t shard_grad_bytes() const;
  size_t buffer_bytes() const;  // bucket staging ever allocated
  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Pending;  // a collective in flight and where its result goes
  void allocate_grad_buffers();
  void register_hooks();
  void on_grad_ready(size_t slot);
  void stage_grad(size_t slot, const torch::Tensor& grad);
  void copy_to_staging(const torch::Tensor& dst, const torch::Tensor& src);
  template <class Fn>
  void for_each_staging_piece(size_t slot, const Fn& fn) const;
  void find_bucket_holes();
  void zero_unstaged(size_t bucket, const torch::Tensor& staging);
  void launch(size_t bucket);
  void permute_rank_major(const partition::UnitBucket& bucket, const torch::Tensor& staging);
  void drain_one();
  bool writes_shard_directly() const;
  void drain_finished();
  torch::Tensor acquire_staging();

  const partition::ModelLayout& layout_;
  std::vector<torch::Tensor> params_;
  dist::CommPtr comm_;
  GradReducerOptions options_;
  std::vector<partition::UnitBucket> buckets_;
  std::vector<size_t> unit_bucket_;   // unit -> bucket
  std::vector<int> bucket_expected_;  // trainable slots per bucket
  std::vector<int> bucket_ready_;     // grads arrived this backward
  std::vector<bool> bucket_launched_;
  std::vector<int> unit_ready_;
  std::vector<bool> slot_seen_;    // this backward
  std::vector<bool> slot_staged_;  // this backward, gradient staged
  // Stages 2, 3: per bucket, the staging ranges no parameter covers, (start, length).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> bucket_holes_;
  std::vector<torch::Tensor> bucket_staging_;          // stages 2, 3: per bucket while filling
  std::unique_ptr<partition::FlatBuffer> full_grads_;  // stages 0, 1 (fp32)
  bool bound_ = false;  // fp32 parameters: .grad are views of full_grads_
  // Stage 0: full_grads_'s flat; stage 1: the start of it (same device) or owned; stages
  // 2, 3: the owned shard.
  torch::Tensor reduced_;
  bool reduced_owned_ = false;
  bool fresh_ = true;       // no micro-batch reduced since zero_grads(): replace, not add
  size_t next_launch_ = 0;  // stages 0, 1: buckets before it were launched
  std::vector<torch::Tensor> free_staging_;
  std::vector<std::unique_ptr<Pending>> in_flight_;
  int64_t max_bucket_ = 0;
  size_t staging_allocated_ = 0;  // elements ever allocated for staging
  size_t staging_acquired_ = 0;   // staging buffers taken since begin_backward()
  torch::ScalarType staging_dtype() const;
  bool active_ = false;
  bool boundary_ = false;
  // What grad_accumulator() returns: std::shared_ptr<Node> up to PyTorch 2.11,
  // c10::intrusive_ptr<Node> by 2.15.
  using AccumulatorPtr =
      decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));
  std::vector<AccumulatorPtr> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::mutex mutex_;
};

}  // namespace zoff::engine
