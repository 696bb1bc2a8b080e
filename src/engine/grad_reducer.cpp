// GradReducer: gradient hooks, rank-major bucket staging, asynchronous bucketed collectives.
#include "zoff/engine/grad_reducer.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <cstdlib>

#include "zoff/core/error.h"

namespace zoff::engine {

// A bucket's collective in flight: `recv` holds this rank's reduced piece (stages 1-3);
// `staging` goes back to the pool once done.
struct GradReducer::Pending {
  size_t bucket = 0;
  dist::WorkPtr work;
  torch::Tensor staging;  // fp32, the bucket's gradients, rank-major
  torch::Tensor recv;     // stages 1-3: this rank's piece of the sum
  bool direct = false;    // recv is the bucket's range of reduced_ itself: nothing to move
};

GradReducer::GradReducer(const partition::ModelLayout& layout, std::vector<torch::Tensor> params,
                         dist::CommPtr comm, GradReducerOptions options)
    : layout_(layout),
      params_(std::move(params)),
      comm_(std::move(comm)),
      options_(std::move(options)),
      buckets_(options_.unit_buckets ? layout.unit_buckets()
                                     : layout.buckets(options_.bucket_elems)) {
  ZOFF_CHECK(options_.mode == GradMode::kAllReduce || layout_.sharded(),
             "reduce-scatter needs a layout sharded per unit");
  unit_bucket_.assign(layout_.units().size(), 0);
  bucket_expected_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t u : buckets_[b].units) {
      unit_bucket_[u] = b;
      bucket_expected_[b] += static_cast<int>(layout_.units()[u].slots.size());
    }
    max_bucket_ = std::max(max_bucket_, buckets_[b].size);
  }
  bucket_ready_.assign(buckets_.size(), 0);
  bucket_launched_.assign(buckets_.size(), false);
  bucket_staging_.resize(buckets_.size());
  unit_ready_.assign(layout_.units().size(), 0);
  slot_seen_.assign(layout_.slots().size(), false);
  slot_staged_.assign(layout_.slots().size(), false);
  if (options_.mode == GradMode::kReduceScatterEveryMicroBatch) find_bucket_holes();

  allocate_grad_buffers();
  register_hooks();
}

void GradReducer::allocate_grad_buffers() {
  const auto device = params_.front().device();
  if (options_.mode == GradMode::kReduceScatterEveryMicroBatch) {
    if (options_.shard_sink) return;  // the shard lives where the sink puts it
    auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(options_.shard_device);
    // Page-locked host memory lets device-to-host copies run asynchronously.
    if (options_.pin_memory && options_.shard_device.is_cpu() && !device.is_cpu()) {
      opts = opts.pinned_memory(true);
    }
    reduced_ = torch::zeros({layout_.shard_size()}, opts);
    reduced_owned_ = true;
  } else {
    full_grads_ = std::make_unique<partition::FlatBuffer>(layout_.slots(), layout_.padded_numel(),
                                                          torch::kFloat32, device);
    // fp32 parameters accumulate straight into the buffer; 16-bit ones are added in.
    bound_ = params_.front().scalar_type() == torch::kFloat32;
    if (bound_) full_grads_->bind_as_grads(params_);
    // Stage 1 reduces into the start of the full buffer itself when both are on one
    // device: buckets launch in buffer order, so bucket j's result, at shard-space
    // [L_j, L_j + B_j), lands inside buckets 0..j, which were already copied out.
    if (options_.mode == GradMode::kAllReduce) {
      reduced_ = full_grads_->flat();
    } else if (options_.shard_device == device) {
      reduced_ = full_grads_->range(0, layout_.shard_size());
    } else {
      reduced_ =
          torch::zeros({layout_.shard_size()},
                       torch::TensorOptions().dtype(torch::kFloat32).device(options_.shard_device));
      reduced_owned_ = true;
    }
  }
}

void GradReducer::register_hooks() {
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
  staging_acquired_ = 0;
  // Re-bind in case the user reset .grad (Module::zero_grad sets it to none).
  if (bound_) full_grads_->bind_as_grads(params_);
  std::fill(bucket_ready_.begin(), bucket_ready_.end(), 0);
  std::fill(bucket_launched_.begin(), bucket_launched_.end(), false);
  std::fill(unit_ready_.begin(), unit_ready_.end(), 0);
  std::fill(slot_seen_.begin(), slot_seen_.end(), false);
  std::fill(slot_staged_.begin(), slot_staged_.end(), false);
  next_launch_ = 0;
}

// Staging buffers in use at once before acquire_staging() waits for a collective. Two, as
// DeepSpeed's overlap_comm: a bucket fills while the previous one's collective runs. With one,
// the first gradient of every bucket waited for the previous bucket's collective, which ends
// only when every peer has reached it: a synchronization with the peers at each bucket, in the
// middle of backward, that soaked up each phase's imbalance between ranks. It shows when
// the ranks drift apart (gpt small, bf16, stage 2, 2 ranks: profiles with one buffer had
// zoff::stage_grad at 24-28 ms per step against ~4 ms usually; with two, no such spikes in
// alternating runs, the usual step unchanged). The second buffer is one more bucket of the
// compute dtype.
constexpr size_t kStagingBuffers = 2;

torch::Tensor GradReducer::acquire_staging() {
  // The k-th buffer a backward takes (k from 0) is a new one while fewer than
  // min(k + 1, kStagingBuffers) exist; otherwise a buffer of a collective already done, or
  // the oldest collective's once it ends. Not "a done buffer first": how many buffers a
  // backward allocated then hung on how soon the peers finished a collective, and with it
  // buffer_bytes() (the memory report's, which the run plan's "reduce staging" predicts as
  // min(2, buckets)). Past the cap only when no collective is in flight (buckets filling out
  // of order). Every buffer is free again when a backward begins (end_backward drains).
  const size_t wanted = std::min(staging_acquired_ + 1, kStagingBuffers);
  ++staging_acquired_;
  if (staging_allocated_ >= wanted * static_cast<size_t>(max_bucket_)) {
    if (free_staging_.empty()) drain_finished();
    if (free_staging_.empty() && !in_flight_.empty()) drain_one();
    if (!free_staging_.empty()) {
      auto t = free_staging_.back();
      free_staging_.pop_back();
      return t;
    }
  }
  staging_allocated_ += static_cast<size_t>(max_bucket_);
  if (options_.stage_on_host) {
    const auto opts = options_.transfer && options_.pin_memory
                          ? options_.transfer->host_options(staging_dtype())
                          : torch::TensorOptions().dtype(staging_dtype());
    return torch::empty({max_bucket_}, opts);
  }
  return torch::empty(
      {max_bucket_},
      torch::TensorOptions().dtype(staging_dtype()).device(params_.front().device()));
}

void GradReducer::on_grad_ready(size_t slot) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto& info = layout_.slots()[slot];
  ZOFF_CHECK_ARG(active_, "parameter ", info.name,
                 " got a gradient outside engine.backward(): call engine.backward(loss), not "
                 "loss.backward(), on a model the engine owns");
  const size_t u = layout_.unit_of_slot(slot);
  const size_t b = unit_bucket_[u];
  ZOFF_CHECK(!slot_seen_[slot] && !bucket_launched_[b], "parameter ", info.name,
             " got a second gradient in one engine.backward() after its bucket was reduced (a "
             "re-entrant backward, or one parameter used in two checkpointed segments): such a "
             "gradient would be lost");
  slot_seen_[slot] = true;
  auto& param = params_[info.module_index];
  if (!bound_) {
    auto grad = param.grad();
    if (grad.defined()) stage_grad(slot, grad);
    param.mutable_grad().reset();
  }
  const bool complete = ++bucket_ready_[b] == bucket_expected_[b];
  if (++unit_ready_[u] == static_cast<int>(layout_.units()[u].slots.size()) &&
      options_.on_unit_done) {
    options_.on_unit_done(u);
  }
  // Early drains only at the last micro-batch, where a final range can be stepped at once.
  if (options_.on_shard_final && boundary_) drain_finished();
  if (!complete || !options_.overlap) return;
  if (options_.mode == GradMode::kReduceScatterEveryMicroBatch) {
    launch(b);
  } else if (boundary_) {
    // Stages 0, 1 launch in buffer order (stage 1's in-place result relies on it).
    while (next_launch_ < buckets_.size() &&
           bucket_ready_[next_launch_] == bucket_expected_[next_launch_]) {
      launch(next_launch_++);
    }
  }
}

// Adds one 16-bit or fp32 gradient into its fp32 home: the full buffer (stages 0, 1) or
// its bucket's staging, rank-major (stages 2, 3): rank r's pieces of the bucket's units
// are contiguous at [r * B, (r + 1) * B), B = the bucket's shard size.
void GradReducer::stage_grad(size_t slot, const torch::Tensor& grad) {
  RECORD_USER_SCOPE("zoff::stage_grad");  // into the bucket (or the fp32 full gradient)
  const auto& info = layout_.slots()[slot];
  auto flat = grad.reshape({-1});
  if (options_.mode != GradMode::kReduceScatterEveryMicroBatch) {
    full_grads_->view(slot).view({-1}).add_(flat);
    return;
  }
  // A gradient of another dtype would be rounded into a 16-bit staging buffer.
  ZOFF_CHECK(grad.scalar_type() == staging_dtype() || staging_dtype() == torch::kFloat32,
             "parameter ", info.name, " has a ", grad.scalar_type(), " gradient; the engine's ",
             staging_dtype(), " gradient staging expects its compute dtype");
  const size_t b = unit_bucket_[layout_.unit_of_slot(slot)];
  if (!bucket_staging_[b].defined()) {
    bucket_staging_[b] = acquire_staging();
    // Only the padding: every parameter's range is written by its gradient, or zeroed at
    // launch when none came (a pooled buffer holds an earlier bucket's values).
    for (const auto& hole : bucket_holes_[b]) {
      bucket_staging_[b].narrow(0, hole.first, hole.second).zero_();
    }
  }
  slot_staged_[slot] = true;
  for_each_staging_piece(slot, [&](int64_t dst, int64_t src, int64_t piece) {
    copy_to_staging(bucket_staging_[b].narrow(0, dst, piece), flat.narrow(0, src, piece));
  });
}

// A gradient piece into staging: through the transfer when the staging is in host memory
// and the gradient on a device (asynchronous; launch() waits), else a plain copy.
void GradReducer::copy_to_staging(const torch::Tensor& dst, const torch::Tensor& src) {
  if (options_.transfer && dst.device() != src.device()) {
    options_.transfer->copy(dst, src);
  } else {
    dst.copy_(src);
  }
}

// Calls fn(dst, src, n) for each contiguous piece of a slot in its bucket's rank-major
// staging: elements [src, src + n) of the slot go to staging elements [dst, dst + n).
template <class Fn>
void GradReducer::for_each_staging_piece(size_t slot, const Fn& fn) const {
  const auto& info = layout_.slots()[slot];
  const auto& unit = layout_.units()[layout_.unit_of_slot(slot)];
  const auto& bucket = buckets_[unit_bucket_[layout_.unit_of_slot(slot)]];
  const int64_t S = unit.shard_size, B = bucket.shard_size;
  const int64_t begin = info.offset - unit.offset, end = begin + info.numel;
  for (int64_t pos = begin; pos < end;) {
    const int64_t r = pos / S;
    const int64_t piece = std::min(end, (r + 1) * S) - pos;
    fn(r * B + (unit.shard_offset - bucket.shard_offset) + (pos - r * S), pos - begin, piece);
    pos += piece;
  }
}

// Stages 2, 3: the staging ranges of each bucket that no parameter covers (the units'
// padding), as (start, length), ascending.
void GradReducer::find_bucket_holes() {
  bucket_holes_.assign(buckets_.size(), {});
  std::vector<std::vector<std::pair<int64_t, int64_t>>> covered(buckets_.size());
  for (size_t s = 0; s < layout_.slots().size(); ++s) {
    const size_t b = unit_bucket_[layout_.unit_of_slot(s)];
    for_each_staging_piece(
        s, [&](int64_t dst, int64_t, int64_t piece) { covered[b].emplace_back(dst, piece); });
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    std::sort(covered[b].begin(), covered[b].end());
    int64_t at = 0;
    for (const auto& [start, length] : covered[b]) {
      if (start > at) bucket_holes_[b].emplace_back(at, start - at);
      at = std::max(at, start + length);
    }
    if (buckets_[b].size > at) bucket_holes_[b].emplace_back(at, buckets_[b].size - at);
  }
}

// Zeroes the staging ranges of a bucket's parameters that got no gradient this backward.
void GradReducer::zero_unstaged(size_t b, const torch::Tensor& staging) {
  for (size_t u : buckets_[b].units) {
    for (size_t s : layout_.units()[u].slots) {
      if (slot_staged_[s]) continue;
      for_each_staging_piece(
          s, [&](int64_t dst, int64_t, int64_t piece) { staging.narrow(0, dst, piece).zero_(); });
    }
  }
}

// Stage 1: copies a bucket of the full gradient buffer into staging, rank-major.
void GradReducer::permute_rank_major(const partition::UnitBucket& bucket,
                                     const torch::Tensor& staging) {
  auto full = full_grads_->flat();
  for (int64_t r = 0; r < comm_->size(); ++r) {
    for (size_t u : bucket.units) {
      const auto& unit = layout_.units()[u];
      copy_to_staging(
          staging.narrow(0, r * bucket.shard_size + unit.shard_offset - bucket.shard_offset,
                         unit.shard_size),
          full.narrow(0, unit.piece_offset(r), unit.shard_size));
    }
  }
}

void GradReducer::launch(size_t b) {
  if (bucket_launched_[b]) return;
  RECORD_USER_SCOPE("zoff::launch_gradient_collective");
  bucket_launched_[b] = true;
  const auto& bucket = buckets_[b];
  auto pending = std::make_unique<Pending>();
  pending->bucket = b;
  if (options_.mode == GradMode::kAllReduce) {
    pending->work = comm_->all_reduce_sum(full_grads_->range(bucket.offset, bucket.size));
    in_flight_.push_back(std::move(pending));
    return;
  }
  if (options_.mode == GradMode::kReduceScatterAtBoundary) {
    pending->staging = acquire_staging();
    permute_rank_major(bucket, pending->staging);
  } else {
    if (!bucket_staging_[b].defined()) {  // no parameter of this bucket got a gradient
      bucket_staging_[b] = acquire_staging();
      bucket_staging_[b].narrow(0, 0, bucket.size).zero_();
    } else {
      zero_unstaged(b, bucket_staging_[b]);
    }
    pending->staging = bucket_staging_[b];
    bucket_staging_[b] = torch::Tensor();
  }
  // Gradients still on their way from the device land before the collective reads them.
  if (options_.transfer) options_.transfer->wait();
  // The sum is fp32 whatever the staging dtype (the Comm accumulates 16-bit input in fp32).
  // The first micro-batch after zero_grads() has nothing to add to: its sum goes straight
  // into the shard (no buffer, no add pass, and zero_grads() need not clear the shard).
  pending->direct = writes_shard_directly() && bucket.shard_size > 0;
  pending->recv = pending->direct ? reduced_.narrow(0, bucket.shard_offset, bucket.shard_size)
                                  : torch::empty({bucket.shard_size},
                                                 pending->staging.options().dtype(torch::kFloat32));
  pending->work =
      comm_->reduce_scatter_sum(pending->staging.narrow(0, 0, bucket.size), pending->recv);
  in_flight_.push_back(std::move(pending));
}

// Waits for the oldest collective and moves its result where it belongs.
void GradReducer::drain_one() {
  auto pending = std::move(in_flight_.front());
  in_flight_.erase(in_flight_.begin());
  {
    RECORD_USER_SCOPE("zoff::wait_gradient_collective");
    pending->work->wait();
  }
  const auto& bucket = buckets_[pending->bucket];
  if (pending->recv.defined() && bucket.shard_size > 0 && !pending->direct) {
    auto piece = pending->recv.to(options_.shard_device, /*non_blocking=*/true);
    if (options_.shard_sink) {
      options_.shard_sink(bucket.shard_offset, piece, fresh_);
    } else if (options_.mode == GradMode::kReduceScatterAtBoundary) {
      reduced_.narrow(0, bucket.shard_offset, bucket.shard_size).copy_(piece);
    } else {  // stages 2, 3 accumulate micro-batches in the fp32 shard
      reduced_.narrow(0, bucket.shard_offset, bucket.shard_size).add_(piece);
    }
  }
  if (pending->staging.defined()) free_staging_.push_back(pending->staging);
  if (boundary_ && options_.on_shard_final && options_.mode != GradMode::kAllReduce) {
    options_.on_shard_final(bucket.shard_offset, bucket.shard_size);
  }
}

// The collectives already done, oldest first (results land in launch order).
void GradReducer::drain_finished() {
  while (!in_flight_.empty() && in_flight_.front()->work->done()) drain_one();
}

void GradReducer::end_backward() {
  ZOFF_CHECK(active_, "end_backward() without begin_backward()");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (options_.mode == GradMode::kReduceScatterEveryMicroBatch || boundary_) {
      for (size_t b = 0; b < buckets_.size(); ++b) launch(b);
    }
    active_ = false;
  }
  while (!in_flight_.empty()) drain_one();
  fresh_ = false;  // every bucket's range was written: later micro-batches add
}

void GradReducer::abort_backward() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    active_ = false;
  }
  while (!in_flight_.empty()) {
    try {
      drain_one();
    } catch (...) {
      in_flight_.clear();  // the communicator is broken; nothing more to wait for
    }
  }
  // Copies from the device still landing in a half-filled bucket finish before the buffer
  // goes back to the pool (the next backward would write it).
  if (options_.transfer) {
    try {
      options_.transfer->wait();
    } catch (...) {
    }
  }
  for (auto& s : bucket_staging_) {
    if (s.defined()) free_staging_.push_back(s);
    s = torch::Tensor();
  }
}

torch::Tensor GradReducer::reduced_grads() { return reduced_; }

// Stages 2, 3 with the shard in this process's memory (no sink), before any micro-batch of
// this step was reduced: the collective's output can be the shard itself.
bool GradReducer::writes_shard_directly() const {
  return fresh_ && options_.mode == GradMode::kReduceScatterEveryMicroBatch &&
         !options_.shard_sink && reduced_owned_ && reduced_.device().is_cpu();
}

void GradReducer::zero_grads() {
  fresh_ = true;
  if (full_grads_) full_grads_->flat().zero_();
  // A shard written directly is overwritten bucket by bucket by the next backward: every
  // bucket is launched (end_backward launches those no gradient reached), so all of it.
  if (reduced_owned_ && !writes_shard_directly()) reduced_.zero_();
}

size_t GradReducer::full_grad_bytes() const { return full_grads_ ? full_grads_->bytes() : 0; }

size_t GradReducer::shard_grad_bytes() const {
  return reduced_owned_ ? static_cast<size_t>(reduced_.numel()) * sizeof(float) : 0;
}

size_t GradReducer::buffer_bytes() const {
  return staging_allocated_ * c10::elementSize(staging_dtype());
}

torch::ScalarType GradReducer::staging_dtype() const {
  // Stage 1's staging is permuted from the fp32 full-gradient buffer.
  return options_.mode == GradMode::kReduceScatterEveryMicroBatch ? options_.staging_dtype
                                                                  : torch::kFloat32;
}

}  // namespace zoff::engine
