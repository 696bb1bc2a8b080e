// ComputeParams: the parameters the model computes with (compute dtype) and how each step's
// updated master gets into them. Stages 0-2 keep them whole on every rank (WholeParams, with
// stages 1-2's shard space beside them); stage 3 keeps this rank's pieces and gathers a unit
// when the model runs it (UnitGatherer). The engine steps both through this one interface.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <unordered_map>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/core/device_transfer.h"
#include "zoff/dist/comm.h"
#include "zoff/engine/grad_reducer.h"
#include "zoff/engine/master_store.h"
#include "zoff/engine/memory_stats.h"
#include "zoff/engine/step_meter.h"
#include "zoff/engine/step_times.h"
#include "zoff/engine/unit_gatherer.h"
#include "zoff/partition/model_layout.h"
#include "zoff/placement/placement.h"

namespace zoff::engine {

// What the compute parameters are made from. The pointers outlive the ComputeParams.
struct ComputeParamsSetup {
  torch::nn::Module* module = nullptr;  // stage 3 installs its gather hooks on it
  const partition::ModelLayout* layout = nullptr;
  dist::CommPtr comm;
  placement::Placement placement;
  const config::Config* config = nullptr;
  torch::ScalarType dtype = torch::kFloat32;  // the compute dtype
  torch::Device device = torch::kCPU;         // the compute device
  // The GPU path (a module on an accelerator, or EngineOptions::device_path_on_cpu): host
  // buffers of `host_options` (page-locked with pin_memory) gather the parameters and
  // `transfer` copies them to the device.
  bool on_device = false;
  torch::TensorOptions host_options;
  DeviceTransfer* transfer = nullptr;
  // Stage 3: the modules of each unit (where its hooks gather it), and whether the units
  // start released (a model built without its values).
  std::unordered_map<const torch::nn::Module*, std::vector<size_t>> module_units;
  bool start_released = false;
  // Where stage 3 counts its units and its waits for parameter pieces (may be null).
  StepMeter* meter = nullptr;
};

class ComputeParams {
 public:
  virtual ~ComputeParams() = default;

  // Setup, after the master store exists: `master` is the fp32 master in memory (undefined
  // when it lives on disk), which the step updates and the publish reads. Stages 1-3 make
  // their shard space here (the master itself when it can be: fp32 on the same device).
  virtual void attach(torch::Tensor master, MasterStore& store) = 0;
  // Setup, unit by unit in buffer order: rank 0's values of unit u (fp32, padded) and this
  // rank's piece of them; then finish_fill() makes `trainable` views of the parameters.
  virtual void fill_unit(size_t u, const torch::Tensor& values, const torch::Tensor& mine) = 0;
  virtual void finish_fill(const std::vector<torch::Tensor>& trainable) = 0;

  // The reducer's unit callback (stage 3 releases a unit's gradients' parameters).
  virtual void wire(GradReducerOptions* /*options*/) {}
  virtual void begin_backward() {}
  virtual void end_backward() {}

  // The compute-dtype tensor over the optimizer's elements: the whole flat parameters at
  // stage 0, this rank's shard space at stages 1-3 (undefined when the pieces live on disk
  // or the step writes them into one copy per host).
  torch::Tensor optimizer_output() const { return output_; }
  // Where a step writes the compute copy of the updated master: `target` (16-bit; fp32
  // only when the master is not in memory), or nowhere.
  StepOutput step_output(const torch::Tensor& target) const;
  StepOutput step_output() const { return step_output(output_); }
  // One optimizer step of `store` over `grads` (nullptr: the store keeps them) at `lr`,
  // then its publication; adds to times->optimizer_ms and times->allgather_ms.
  virtual void update(MasterStore& store, const float* grads, double lr, StepTimes* times);
  // Brings the updated master (or the shard space the step wrote) into the parameters the
  // model computes with: stages 1-2's all-gather, stage 3's refresh of whole units.
  void publish(StepTimes* times);
  // After a checkpoint restore wrote the store: the compute copy from the master, rounded
  // to the compute dtype as the fused pass rounds (nearest even); publish() comes next.
  void rebuild(MasterStore& store);

  // Stages 0-2: the whole flat parameters; stage 3: this rank's shard space.
  virtual torch::Tensor flat() const = 0;
  // The compute parameters' bytes and the buffers beside them (memory_stats.h).
  virtual void add_bytes(MemoryStats* m) const = 0;
  // Stage 3's gatherer, else nullptr.
  virtual UnitGatherer* gatherer() { return nullptr; }
  const UnitGatherer* gatherer() const { return const_cast<ComputeParams*>(this)->gatherer(); }

 protected:
  explicit ComputeParams(ComputeParamsSetup setup) : s_(std::move(setup)) {}
  bool fp32() const { return s_.dtype == torch::kFloat32; }
  // Stages 1-3: the shard space the step writes the compute copy into: the master itself
  // when it can be (fp32, in memory), else a buffer of its own unless `none` (the pieces
  // live on disk, or the step writes them into one copy per host).
  void make_shard_space(bool none);
  // fp32 with a master apart from the shard space: the new master into it.
  void copy_master_to_shard();
  virtual void publish_master() = 0;
  // Rebuild from a disk master: elements [at, at + n) of the shard space from `values`.
  virtual void write_rebuilt(int64_t at, const torch::Tensor& values);

  ComputeParamsSetup s_;
  torch::Tensor master_;       // the fp32 master in memory, or undefined
  torch::Tensor shard_space_;  // stages 1-3: this rank's pieces, compute dtype
  torch::Tensor output_;       // optimizer_output()
};

// Stages 0-2: WholeParams; stage 3: a UnitGatherer over this rank's pieces (in memory, or
// with offload_param nvme in a tier of their own that the disk store writes each step).
std::unique_ptr<ComputeParams> make_compute_params(ComputeParamsSetup setup);

}  // namespace zoff::engine
