// ZeRO stage 3: each unit's parameters whole only while they are used, gathered ahead of use.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "zoff/core/device_transfer.h"
#include "zoff/dist/comm.h"
#include "zoff/engine/spare_buffers.h"
#include "zoff/engine/step_meter.h"
#include "zoff/engine/unit_pieces.h"
#include "zoff/partition/flat_buffer.h"
#include "zoff/partition/model_layout.h"
#include "zoff/unit/unit_hooks.h"

namespace zoff::engine {

struct UnitGathererOptions {
  int64_t prefetch_elems = 50000000;       // stage3_prefetch_bucket_size
  int64_t max_live_elems = 1000000000;     // stage3_max_live_parameters
  int64_t persistence_threshold = 100000;  // stage3_param_persistence_threshold
  // Start with every unit released (its values only in the pieces) instead of whole: for
  // a model built without its values (unit/deferred_init.h), whose whole 16-bit copy may not
  // fit in memory. Then every unit must run through zoff::with_unit: a unit that does not is
  // never gathered, and LibTorch refuses to read its parameters ("data is not allocated").
  bool start_released = false;
  // The GPU path (a module on an accelerator, or EngineOptions::device_path_on_cpu): the
  // units' buffers are on `device`; each unit is all-gathered into a host buffer of
  // `host_options` (the collectives run over host transports) and copied to the device
  // through `transfer` once its gather landed. Null: gathered in place.
  DeviceTransfer* transfer = nullptr;
  torch::Device device = torch::kCPU;
  torch::TensorOptions host_options;
};

// Every rank keeps its piece of each unit in `pieces` (compute dtype: a host tensor, or a
// tier on disk read ahead of use along the same trace as the gathers). A unit is whole
// (all-gathered into its own flat buffer, of which the module's parameters are views) only between
// zoff::with_unit's before_forward and after_forward, and again from the gradient of its output to
// the end of its own backward. Releasing frees the buffer's storage but keeps the tensors, so the
// views that autograd saved in forward see the values again once the unit is gathered for backward
// (FSDP's trick of resizing the storage to zero).
//
// Prefetch: the order in which units enter forward on the first step is recorded; later
// steps gather the next units of that order asynchronously (at most prefetch_elems ahead,
// never more than max_live_elems whole at once), and backward the previous ones. A unit
// needed now is gathered even above max_live_elems: the bound is max_live_elems plus one
// unit. Units below persistence_threshold elements, and units the model never runs
// through with_unit (seen on the first step), stay whole all the time.
//
// Each state transition is a named method; all ranks make the same calls in the same order
// (their models run the same code), so their all-gathers match.
class UnitGatherer final : public unit::UnitHooks {
 public:
  enum class State { kReleased, kGathering, kGathered };

  // One whole buffer per unit (`dtype`, host memory or options.device; without storage when
  // options.start_released). Fill every unit, then bind the parameters.
  UnitGatherer(const partition::ModelLayout& layout,
               std::unordered_map<const torch::nn::Module*, std::vector<size_t>> module_units,
               std::unique_ptr<UnitPieces> pieces, torch::ScalarType dtype, dist::CommPtr comm,
               UnitGathererOptions options);
  ~UnitGatherer() override;

  // Copies one unit's padded values (compute dtype) in: called for every unit at setup,
  // in order, then finish_fill().
  void fill_unit(size_t unit, const torch::Tensor& values);
  void finish_fill() { pieces_->finish_fill(); }
  // Makes the trainable `params` (indexed like the layout's module_index) views of the
  // units' whole buffers.
  void bind_parameters(const std::vector<torch::Tensor>& params);

  void before_forward(const torch::nn::Module& module) override;
  void after_forward(const torch::nn::Module& module) override;
  void before_backward(const torch::nn::Module& module) override;

  // The engine's backward brackets: units stay whole between a recomputation and their
  // backward; at the end every unit not persistent is released.
  void begin_backward();
  void end_backward();
  // Called when a unit's gradients are all out (from the gradient reducer).
  void unit_backward_done(size_t unit);
  // Runs fn() with unit u whole (gathered if it was not), then releases it again unless it
  // was whole before or is persistent. Collective, like a forward through the unit.
  void with_whole(size_t u, const std::function<void()>& fn);
  // After the optimizer wrote new shards: refreshes the units that are whole.
  void refresh_whole_units();

  State state(size_t unit) const { return units_[unit].state; }
  bool persistent(size_t unit) const { return units_[unit].persistent; }
  // Elements whole now, and the most whole at once since the first step (which starts with
  // every unit whole), of units that are not persistent.
  int64_t live_elems() const { return live_; }
  int64_t peak_live_elems() const { return peak_live_; }
  // Bytes of whole units now (persistent ones included).
  size_t whole_bytes() const;
  // Bytes of released units' buffers kept for reuse (never more than two of the largest
  // units that are not persistent; none after backward).
  size_t spare_bytes() const { return spare_.bytes(); }
  // Counts each unit entering forward and each unit done with backward (may be null).
  void set_meter(StepMeter* meter) { meter_ = meter; }
  size_t unit_count() const { return units_.size(); }
  const UnitPieces& pieces() const { return *pieces_; }

 private:
  struct Unit {
    std::vector<partition::ParamSlot> slots;  // offsets within the unit
    std::unique_ptr<partition::FlatBuffer> whole;
    torch::Tensor sending;  // this rank's piece while an all-gather reads it
    torch::Tensor landing;  // the GPU path: the host buffer the all-gather writes
    State state = State::kGathered;
    dist::WorkPtr work;
    bool persistent = false;
    bool managed = false;  // seen in with_unit
    int uses = 0;          // with_unit scopes open on it
    // The StepMeter epochs it was last counted in by forward and by backward.
    int64_t counted_forward = 0, counted_backward = 0;
  };
  const std::vector<size_t>& units_of(const torch::nn::Module& module) const;
  void gather_async(size_t u);
  void wait_whole(size_t u);
  void release(size_t u);
  void finish_send(size_t u);
  void read_ahead(size_t pos, size_t from);
  void prefetch_forward(size_t u);
  void prefetch_backward(size_t u);
  void prefetch(size_t u);
  void finish_first_step();
  void attach_buffer(Unit& unit);
  void detach_buffer(Unit& unit);
  // Where unit u's all-gather writes: its whole buffer, or on the GPU path a host buffer.
  torch::Tensor gather_target(size_t u);
  // The GPU path: copies what landed in the host buffers of `units` to their device buffers
  // and waits for the copies; a no-op otherwise.
  void land(const std::vector<size_t>& units);
  static constexpr size_t kNoPosition = static_cast<size_t>(-1);
  size_t lookahead(size_t pos, size_t k) const;
  static bool backward_follows();
  bool kept_for_backward(size_t u) const;
  // released: freed at once (on a device: not zeroed).
  torch::Tensor new_whole_buffer(int64_t numel, torch::ScalarType dtype, bool released) const;

  const partition::ModelLayout& layout_;
  std::unordered_map<const torch::nn::Module*, std::vector<size_t>> module_units_;
  std::unique_ptr<UnitPieces> pieces_;
  dist::CommPtr comm_;
  UnitGathererOptions options_;
  std::vector<Unit> units_;
  std::vector<size_t> trace_;  // units in first-step forward order
  bool recording_ = true;
  bool in_backward_ = false;
  size_t next_ = 0;    // expected trace position of the next forward unit
  size_t cursor_ = 0;  // trace position reached by backward
  int64_t live_ = 0;
  int64_t peak_live_ = 0;
  // Buffers of released units kept for the next gather of a unit of the same size, at most
  // two of the largest units that are not persistent, dropped at the end of backward.
  SpareBuffers<at::DataPtr> spare_;
  StepMeter* meter_ = nullptr;
  std::recursive_mutex mutex_;
};

}  // namespace zoff::engine
