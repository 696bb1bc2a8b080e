// Stages 0-2's compute parameters: whole on every rank (WholeParams), the shard space beside them.
#include <ATen/record_function.h>

#include <chrono>

#include "zoff/engine/compute_params.h"
#include "zoff/engine/whole_params.h"

namespace zoff::engine {
namespace {

using Clock = std::chrono::steady_clock;

class WholeComputeParams final : public ComputeParams {
 public:
  explicit WholeComputeParams(ComputeParamsSetup setup) : ComputeParams(std::move(setup)) {
    WholeParamsOptions wo;
    wo.dtype = s_.dtype;
    wo.device = s_.device;
    wo.per_host = s_.placement.params_per_host;
    wo.on_device = s_.on_device;
    if (s_.on_device) wo.host_options = s_.host_options;
    wo.transfer = s_.transfer;
    whole_ = std::make_unique<WholeParams>(*s_.layout, s_.comm, wo);
  }

  void attach(torch::Tensor master, MasterStore& store) override {
    master_ = std::move(master);
    if (stage() == 0) {  // the optimizer runs over the whole buffer
      output_ = whole_->flat();
      return;
    }
    // One copy per host in 16 bits, the optimizer's master in memory, no delayed update: the
    // fused pass writes this rank's pieces of the copy itself, and no 16-bit shard is kept.
    in_step_ = whole_->shared() && !fp32() && !s_.placement.optimizer_on_disk() &&
               !s_.placement.delayed_update;
    if (in_step_) own_pieces_ = whole_->own_pieces();
    // A split master in memory keeps its copy half in those pieces.
    if (in_step_ && s_.placement.split_master) store.bind_compute_pieces(own_pieces_);
    make_shard_space(/*none=*/in_step_);
    output_ = shard_space_;
  }

  void fill_unit(size_t u, const torch::Tensor& values, const torch::Tensor& mine) override {
    whole_->fill_unit(u, values, mine);
    if (stage() >= 1 && shard_space_.defined() && !shard_space_.is_same(master_)) {
      const auto& unit = s_.layout->units()[u];
      shard_space_.narrow(0, unit.shard_offset, unit.shard_size).copy_(mine);
    }
  }
  void finish_fill(const std::vector<torch::Tensor>& trainable) override {
    whole_->bind(trainable);
  }

  // Stages 1-2 with the fused pass writing into the one copy per host: between the same two
  // barriers as WholeParams::publish, the optimizer writes this rank's pieces itself.
  void update(MasterStore& store, const float* grads, double lr, StepTimes* times) override {
    if (!in_step_) return ComputeParams::update(store, grads, lr, times);
    const auto wait_start = Clock::now();
    s_.comm->barrier();  // no peer reads the parameters any more
    times->allgather_ms += ms_since(wait_start);
    const auto update_start = Clock::now();
    {
      RECORD_USER_SCOPE("zoff::optimizer_step");
      store.step_scattered(grads, lr, step_output(torch::Tensor()).copy_out, own_pieces_);
    }
    times->optimizer_ms += ms_since(update_start);
    RECORD_USER_SCOPE("zoff::publish_params");
    const auto publish_start = Clock::now();
    s_.comm->barrier();  // every rank's pieces are written
    times->allgather_ms += ms_since(publish_start);
  }

  torch::Tensor flat() const override { return whole_->flat(); }

  void add_bytes(MemoryStats* m) const override {
    m->compute.params = whole_->bytes();
    if (whole_->shared()) {  // one copy per host: this rank's share of it
      m->host_shared_params = whole_->bytes();
      m->compute.params = whole_->bytes() / static_cast<size_t>(s_.comm->size());
    }
    // Stages 1, 2: the shard the optimizer writes, which the publish sends or copies.
    if (shard_space_.defined() && !shard_space_.is_same(master_)) {
      (s_.on_device ? m->offload.buffers : m->compute.buffers) +=
          static_cast<size_t>(shard_space_.nbytes());
    }
    m->offload.buffers += whole_->host_bytes();
  }

 private:
  int stage() const { return s_.placement.stage; }

  // Brings this rank's updated shard into every rank's whole parameters.
  void publish_master() override {
    if (stage() == 0) {
      if (fp32() && !s_.placement.master_is_params) {
        whole_->flat().copy_(master_, /*non_blocking=*/true);
      }
      return;
    }
    copy_master_to_shard();
    if (in_step_ && !master_.defined()) {
      // A split master's copy half is this rank's pieces, written with the master: once
      // every rank has written, every piece is there.
      s_.comm->barrier();
      return;
    }
    // Without a 16-bit shard (in_step_): rounded from the master, as the fused pass rounds
    // (nearest even).
    whole_->publish(in_step_ ? master_ : shard_space_);
  }

  std::unique_ptr<WholeParams> whole_;
  // One copy per host written by the step itself: this rank's pieces of it.
  bool in_step_ = false;
  optim::CopyOutPieces own_pieces_;
};

}  // namespace

std::unique_ptr<ComputeParams> make_whole_compute_params(ComputeParamsSetup setup) {
  return std::make_unique<WholeComputeParams>(std::move(setup));
}

}  // namespace zoff::engine
