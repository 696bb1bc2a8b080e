// Stage 3's compute parameters: this rank's pieces (in memory or on disk), units gathered on use.
#include <cstring>

#include "zoff/engine/compute_params.h"
#include "zoff/engine/unit_pieces.h"
#include "zoff/offload/host_buffer.h"
#include "zoff/placement/store_tier.h"
#include "zoff/unit/unit_hooks.h"

namespace zoff::engine {
namespace {

class UnitComputeParams final : public ComputeParams {
 public:
  explicit UnitComputeParams(ComputeParamsSetup setup) : ComputeParams(std::move(setup)) {}
  ~UnitComputeParams() override {
    if (hooked_) unit::remove_hooks(*s_.module);
  }

  void attach(torch::Tensor master, MasterStore& store) override {
    master_ = std::move(master);
    make_shard_space(/*none=*/s_.placement.params_on_disk());
    output_ = shard_space_;
    UnitGathererOptions go;
    go.prefetch_elems = s_.config->zero.stage3_prefetch_bucket_size;
    go.max_live_elems = s_.config->zero.stage3_max_live_parameters;
    go.persistence_threshold = s_.config->zero.stage3_param_persistence_threshold;
    go.start_released = s_.start_released;
    if (s_.on_device) {  // units gathered in host memory, then copied to the device
      go.transfer = s_.transfer;
      go.device = s_.device;
      go.host_options = s_.host_options;
    }
    gatherer_ = std::make_unique<UnitGatherer>(*s_.layout, s_.module_units, make_pieces(store),
                                               s_.dtype, s_.comm, go);
    gatherer_->set_meter(s_.meter);
  }

  void fill_unit(size_t u, const torch::Tensor& values, const torch::Tensor& /*mine*/) override {
    gatherer_->fill_unit(u, values);  // converted piece by piece: no whole-unit temporary
  }
  void finish_fill(const std::vector<torch::Tensor>& trainable) override {
    gatherer_->finish_fill();
    gatherer_->bind_parameters(trainable);
    unit::install_hooks(*s_.module, gatherer_.get());
    hooked_ = true;
  }

  void wire(GradReducerOptions* options) override {
    UnitGatherer* g = gatherer_.get();
    options->on_unit_done = [g](size_t u) { g->unit_backward_done(u); };
  }
  void begin_backward() override { gatherer_->begin_backward(); }
  void end_backward() override { gatherer_->end_backward(); }

  torch::Tensor flat() const override { return shard_space_; }

  void add_bytes(MemoryStats* m) const override {
    // On the GPU path the pieces are host memory and the whole units the device's.
    const size_t pieces = gatherer_->pieces().resident_bytes();
    m->compute.params = gatherer_->whole_bytes() + (s_.on_device ? 0 : pieces);
    if (s_.on_device) m->offload.params = pieces;
    if (region_) m->nvme.params = region_->bytes();
    m->live_unit_bytes = gatherer_->whole_bytes();
    m->peak_live_bytes =
        static_cast<size_t>(gatherer_->peak_live_elems()) * c10::elementSize(s_.dtype);
  }
  UnitGatherer* gatherer() override { return gatherer_.get(); }

 private:
  // This rank's unit pieces: in the shard space or, with offload_param nvme, in a region of
  // a tier of their own under offload_param.nvme_path, which the disk store writes each
  // step's new pieces into.
  std::unique_ptr<UnitPieces> make_pieces(MasterStore& store) {
    if (!s_.placement.params_on_disk()) return make_host_unit_pieces(*s_.layout, shard_space_);
    tier_ = placement::make_tier(s_.placement.params,
                                 "zoff_params_rank" + std::to_string(s_.comm->rank()),
                                 placement::aio_options(s_.config->aio));
    const size_t element_bytes = c10::elementSize(s_.dtype);
    region_ =
        tier_->allocate("params", static_cast<size_t>(s_.layout->shard_size()) * element_bytes);
    store.tiered()->set_output_region(region_.get(), element_bytes);
    // Read buffers kept between steps unless the run is short of memory (as the large-block
    // cache: placement::rss_first_heap).
    return make_tier_unit_pieces(*s_.layout, *region_, tier_->alignment(), s_.dtype,
                                 s_.config->zero.offload_param.max_in_cpu, s_.meter,
                                 !s_.placement.rss_first_heap);
  }

  void publish_master() override {
    copy_master_to_shard();
    gatherer_->refresh_whole_units();
  }

  // The pieces on disk: rounded to the compute dtype and written at their place there.
  void write_rebuilt(int64_t at, const torch::Tensor& values) override {
    if (!region_) return ComputeParams::write_rebuilt(at, values);
    auto rounded = values.to(s_.dtype);
    const size_t bytes = static_cast<size_t>(rounded.nbytes());
    // Its own aligned buffer, gone with the range: restores are rare, RSS is what matters.
    offload::HostBuffer aligned(bytes, tier_->alignment());
    std::memcpy(aligned.data(), rounded.data_ptr(), bytes);
    region_->write(static_cast<uint64_t>(at) * c10::elementSize(s_.dtype), aligned.data(), bytes)
        .wait();
  }

  // Destroyed in reverse: the gatherer (reading the region) before the region, before its tier.
  std::unique_ptr<offload::Tier> tier_;
  std::unique_ptr<offload::TierRegion> region_;
  std::unique_ptr<UnitGatherer> gatherer_;
  bool hooked_ = false;
};

}  // namespace

std::unique_ptr<ComputeParams> make_unit_compute_params(ComputeParamsSetup setup) {
  return std::make_unique<UnitComputeParams>(std::move(setup));
}

}  // namespace zoff::engine
