// GradReducer: gradient hooks, bucket staging, and asynchronous bucketed collectives.
#include "zoff/engine/grad_reducer.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "zoff/core/error.h"

namespace zoff::engine {

// A bucket's collective in flight: `recv` holds this rank's reduced piece when stage 1 or 2
// reduce-scatters; `staging` goes back to the pool once done.
struct GradReducer::Pending {
  size_t bucket = 0;
  dist::WorkPtr work;
  torch::Tensor staging;  // stage 2: the bucket's gradients (fp32)
  torch::Tensor recv;     // stages 1, 2: this rank's piece of the sum
};

GradReducer::GradReducer(const partition::FlatLayout& layout, std::vector<torch::Tensor> params,
                         dist::CommPtr comm, GradReducerOptions options)
    : layout_(layout),
      params_(std::move(params)),
      comm_(std::move(comm)),
      mode_(options.mode),
      overlap_(options.overlap),
      shard_device_(options.shard_device),
      shard_(layout.shard(comm_->rank())),
      buckets_(layout.buckets(options.bucket_elems)) {
  slot_bucket_.assign(layout_.slots().size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t s : buckets_[b].slots) slot_bucket_[s] = b;
    max_bucket_ = std::max(max_bucket_, buckets_[b].size);
  }
  bucket_ready_.assign(buckets_.size(), 0);
  bucket_launched_.assign(buckets_.size(), false);
  bucket_staging_.resize(buckets_.size());

  const auto device = params_.front().device();
  const auto dtype = params_.front().scalar_type();
  auto owned_fp32 = [&](torch::Device where, int64_t n) {
    auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(where);
    // Page-locked host memory lets device-to-host copies run asynchronously.
    if (options.pin_memory && where.is_cpu() && !device.is_cpu()) opts = opts.pinned_memory(true);
    reduced_owned_bytes_ = static_cast<size_t>(n) * sizeof(float);
    return torch::zeros({n}, opts);
  };
  if (mode_ == GradMode::kReduceScatterEveryMicroBatch) {
    reduced_ = owned_fp32(shard_device_, shard_.size);
  } else {
    full_grads_ = std::make_unique<partition::FlatBuffer>(layout_, dtype, device);
    full_grads_->bind_as_grads(params_);
    const bool fp32 = dtype == torch::kFloat32;
    if (mode_ == GradMode::kAllReduce) {
      reduced_ = fp32 ? full_grads_->flat() : owned_fp32(device, layout_.padded_numel());
    } else {
      // fp32 stage 1 on one device reduces into its own range of the full buffer.
      reduced_ = fp32 && shard_device_ == device ? full_grads_->range(shard_)
                                                 : owned_fp32(shard_device_, shard_.size);
    }
  }

  // A post-hook on each parameter's gradient accumulator fires once per backward, after
  // the gradient has been accumulated into .grad. We hold the accumulators: autograd
  // keeps only a weak reference, and a new accumulator would not have our hook.
  const auto& slots = layout_.slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    auto& param = params_[slots[i].module_index];
    auto acc = torch::autograd::impl::grad_accumulator(param);
    ZOFF_CHECK(acc != nullptr, "parameter ", slots[i].name, " does not require grad");
    auto key = acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, i](const torch::autograd::variable_list& outputs,
                  const torch::autograd::variable_list& /*inputs*/) {
          on_grad_ready(i);
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));
    hook_keys_.push_back(key);
  }
}

GradReducer::~GradReducer() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hook_keys_[i]);
  // Collectives still in flight read our buffers: let them finish (they time out).
  for (auto& p : in_flight_) {
    try {
      p->work->wait();
    } catch (...) {
    }
  }
}

void GradReducer::begin_backward(bool boundary) {
  ZOFF_CHECK(!active_, "backward started twice without end_backward()");
  active_ = true;
  boundary_ = boundary;
  if (full_grads_) {
    // Re-bind in case the user reset .grad (Module::zero_grad sets it to none).
    full_grads_->bind_as_grads(params_);
  }
  std::fill(bucket_ready_.begin(), bucket_ready_.end(), 0);
  std::fill(bucket_launched_.begin(), bucket_launched_.end(), false);
}

torch::Tensor GradReducer::acquire_staging() {
  if (free_staging_.empty()) {
    // Reuse a buffer from the oldest finished collective before growing the pool.
    if (!in_flight_.empty()) drain_one();
  }
  if (!free_staging_.empty()) {
    auto t = free_staging_.back();
    free_staging_.pop_back();
    return t;
  }
  staging_allocated_ += static_cast<size_t>(max_bucket_);
  return torch::empty(
      {max_bucket_},
      torch::TensorOptions().dtype(torch::kFloat32).device(params_.front().device()));
}

void GradReducer::on_grad_ready(size_t slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_) return;  // a backward the engine did not start (e.g. user's own)
  const size_t b = slot_bucket_[slot];
  const auto& info = layout_.slots()[slot];
  auto& param = params_[info.module_index];
  if (mode_ == GradMode::kReduceScatterEveryMicroBatch) {
    // Copy (and widen to fp32) the parameter's gradient into the bucket, then free it.
    if (!bucket_staging_[b].defined()) {
      bucket_staging_[b] = acquire_staging();
      bucket_staging_[b].narrow(0, 0, buckets_[b].size).zero_();
    }
    auto grad = param.grad();
    if (grad.defined()) {
      bucket_staging_[b]
          .narrow(0, info.offset - buckets_[b].offset, info.numel)
          .copy_(grad.reshape({-1}));
      param.mutable_grad().reset();
    }
  }
  if (++bucket_ready_[b] == static_cast<int>(buckets_[b].slots.size()) && overlap_) {
    if (mode_ == GradMode::kReduceScatterEveryMicroBatch || boundary_) launch(b);
  }
}

void GradReducer::launch(size_t b) {
  if (bucket_launched_[b]) return;
  bucket_launched_[b] = true;
  const auto& bucket = buckets_[b];
  auto pending = std::make_unique<Pending>();
  pending->bucket = b;
  const int64_t mine = bucket.pieces[static_cast<size_t>(comm_->rank())];
  switch (mode_) {
    case GradMode::kAllReduce:
      if (full_grads_->flat().scalar_type() == torch::kFloat32) {
        pending->work = comm_->all_reduce_sum(full_grads_->range(bucket.offset, bucket.size));
      } else {
        // Gloo cannot sum 16-bit types: widen the bucket to fp32 first.
        pending->staging = acquire_staging();
        auto wide = pending->staging.narrow(0, 0, bucket.size);
        wide.copy_(full_grads_->range(bucket.offset, bucket.size));
        pending->work = comm_->all_reduce_sum(wide);
      }
      break;
    case GradMode::kReduceScatterAtBoundary:
      pending->recv = torch::empty(
          {mine},
          torch::TensorOptions().dtype(torch::kFloat32).device(full_grads_->flat().device()));
      pending->work = comm_->reduce_scatter_sum_v(full_grads_->range(bucket.offset, bucket.size),
                                                  bucket.pieces, pending->recv);
      break;
    case GradMode::kReduceScatterEveryMicroBatch: {
      if (!bucket_staging_[b].defined()) {  // no parameter of this bucket got a gradient
        bucket_staging_[b] = acquire_staging();
        bucket_staging_[b].narrow(0, 0, bucket.size).zero_();
      }
      pending->staging = bucket_staging_[b];
      bucket_staging_[b] = torch::Tensor();
      pending->recv = torch::empty({mine}, pending->staging.options());
      pending->work = comm_->reduce_scatter_sum_v(pending->staging.narrow(0, 0, bucket.size),
                                                  bucket.pieces, pending->recv);
      break;
    }
  }
  in_flight_.push_back(std::move(pending));
}

// Waits for the oldest collective and moves its result where it belongs.
void GradReducer::drain_one() {
  auto pending = std::move(in_flight_.front());
  in_flight_.erase(in_flight_.begin());
  pending->work->wait();
  const auto& bucket = buckets_[pending->bucket];
  const int64_t mine = bucket.pieces[static_cast<size_t>(comm_->rank())];
  if (mode_ == GradMode::kAllReduce) {
    if (pending->staging.defined()) {
      reduced_.narrow(0, bucket.offset, bucket.size)
          .copy_(pending->staging.narrow(0, 0, bucket.size));
    }
  } else if (mine > 0) {
    // This rank's piece starts where the bucket meets the shard.
    const int64_t start = std::max(bucket.offset, shard_.offset);
    auto dest = reduced_.narrow(0, start - shard_.offset, mine);
    auto piece = pending->recv.to(shard_device_, /*non_blocking=*/true);
    if (mode_ == GradMode::kReduceScatterAtBoundary) {
      dest.copy_(piece);
    } else {
      dest.add_(piece);  // stage 2 accumulates micro-batches in the fp32 shard
    }
  }
  if (pending->staging.defined()) free_staging_.push_back(pending->staging);
}

void GradReducer::end_backward() {
  ZOFF_CHECK(active_, "end_backward() without begin_backward()");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (mode_ == GradMode::kReduceScatterEveryMicroBatch || boundary_) {
      for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
    }
    active_ = false;
  }
  while (!in_flight_.empty()) drain_one();
}

torch::Tensor GradReducer::reduced_grads() { return reduced_; }

void GradReducer::zero_grads() {
  if (full_grads_) full_grads_->flat().zero_();
  if (reduced_owned_bytes_ > 0) reduced_.zero_();
}

size_t GradReducer::full_grad_bytes() const { return full_grads_ ? full_grads_->bytes() : 0; }

size_t GradReducer::shard_grad_bytes() const { return reduced_owned_bytes_; }

size_t GradReducer::buffer_bytes() const {
  // Staging buckets plus, at most, one receive piece per bucket in flight.
  return staging_allocated_ * sizeof(float);
}

}  // namespace zoff::engine
