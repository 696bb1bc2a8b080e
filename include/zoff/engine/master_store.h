// MasterStore: the fp32 master and the optimizer states of one rank behind one interface, in
// memory or in a disk tier, so the engine steps, checkpoints and reports them alike.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "zoff/config/config.h"
#include "zoff/dist/comm.h"
#include "zoff/engine/tiered_optimizer.h"
#include "zoff/offload/tier.h"
#include "zoff/optim/copy_out_pieces.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/placement/placement.h"

namespace zoff::engine {

// One section of a rank's checkpointed state as stored ("master", "exp_avg", and with int8
// states "exp_avg.scales"...): `numel` elements of `dtype` (a rank-file dtype: "F32", "BF16"
// for bf16 bit patterns, "I8" / "U8" for int8 codes), copied in ranges so a section on disk
// never has to be whole in memory. read/write take (element offset, count, host pointer to
// count elements of dtype). Int8 scales ("<state>.scales", F32) hold one scale per
// optim::kStateBlock elements of their state, block 0 at the shard's element 0.
struct StateSection {
  std::string name;
  std::string dtype = "F32";
  int64_t numel = 0;
  std::function<void(int64_t, int64_t, void*)> read;
  std::function<void(int64_t, int64_t, const void*)> write;
};

// Bytes per element of a StateSection dtype ("F32" 4, "BF16" 2, "I8"/"U8" 1); another name
// throws zoff::UsageError naming it.
size_t section_element_bytes(const std::string& dtype);

// True for the StateSection dtypes of int8 codes ("I8" signed, for exp_avg; "U8" unsigned,
// for exp_avg_sq), which need their block scales and the map that wrote them to decode.
bool is_int8_code_dtype(const std::string& dtype);

// The rank-file dtype of optimizer state `name` stored as `dtype`: "F32", "BF16", or int8
// codes, signed ("I8") for exp_avg and unsigned ("U8") for exp_avg_sq (state_dtype.h's maps).
std::string section_dtype(optim::StateDtype dtype, const std::string& name);

// Where a step writes the compute copy of the updated master: the 16-bit rounding into
// out16 (copy_out != kNone), or the fp32 values into out32 (a store whose master is not
// the compute shard itself). Null pointers: no copy.
struct StepOutput {
  optim::CopyOut copy_out = optim::CopyOut::kNone;
  uint16_t* out16 = nullptr;
  float* out32 = nullptr;
};

// Bytes a store holds, by kind and place.
struct StoreBytes {
  // fp32 master in memory (also when it is the compute parameters: the engine's memory()
  // then counts it as parameters)
  size_t memory_master = 0;
  size_t memory_states = 0;  // states as stored, int8 scales included
  size_t disk_master = 0;
  size_t disk_states = 0;
  size_t disk_grads = 0;    // the gradient shard on disk
  size_t host_buffers = 0;  // a disk store's staging (sub-group buffers, gradient window)
};

// `numel` fp32 master elements and their optimizer states. Filled once at setup (fill(), in
// increasing offsets, then finish_fill()), stepped once per optimizer step, read and written
// by checkpoints through sections().
class MasterStore {
 public:
  virtual ~MasterStore() = default;

  virtual size_t numel() const = 0;
  // Setup: master elements [offset, offset + n) from `values`; calls come in increasing
  // offsets, each starting where the last ended or later (in memory: any order).
  virtual void fill(size_t offset, const float* values, size_t n) = 0;
  virtual void finish_fill() = 0;

  // One optimizer step over `grads` (numel fp32 in host memory; nullptr when the store holds
  // the gradients itself: gradients_sink()).
  virtual void step(const float* grads, double lr, const StepOutput& out) = 0;
  // The same step with the 16-bit copy written into `pieces` (one copy of the parameters per
  // host: this rank's pieces of it). In memory only.
  virtual void step_scattered(const float* grads, double lr, optim::CopyOut copy_out,
                              const optim::CopyOutPieces& pieces);

  // The step overlapped with the last backward (a disk store, placement.overlap_step):
  // begin_step() before backward, grads_final() as ranges become final, finish_step() in
  // step(); abandon_step() when backward failed. See TieredOptimizer.
  virtual void begin_step(const float* grads, double lr, const StepOutput& out);
  virtual void grads_final(size_t offset, size_t n);
  virtual void finish_step();
  virtual void abandon_step();
  // Before a step that is not overlapped (as its last backward begins): a disk store reads
  // what the step starts with meanwhile (TieredOptimizer::prefetch); others do nothing.
  virtual void prefetch_step() {}

  // Gradients the store keeps itself (on disk, or streamed into the step): adds a reduced
  // piece, divided by `divide_by`, and returns the squares of the results. See
  // TieredOptimizer::accumulate_grads.
  virtual double take_grads(size_t offset, const float* piece, size_t n, bool first, int divide_by);
  // Gradient clipping of gradients the store keeps: multiplies them by `coef` as read.
  virtual void set_grad_scale(double coef);

  // The split master (placement.split_master) with its bf16 copy in memory: `copy` (numel
  // bf16 elements, the compute parameters the step writes) is the copy half, read by each
  // step and by the master's sections.
  virtual void bind_compute_copy(const torch::Tensor& copy);
  // The same with the copy half scattered over the pieces of one copy of the parameters per
  // host (stages 1-2, WholeParams::own_pieces). A host store only.
  virtual void bind_compute_pieces(const optim::CopyOutPieces& pieces);
  // The split master: whether the store keeps one, and the odd ties its steps settled.
  virtual bool split_master() const { return false; }
  virtual uint64_t settled_count() const { return 0; }

  // The master and states of elements [offset, offset + numel) as checkpoint sections.
  virtual std::vector<StateSection> sections(int64_t offset, int64_t numel) = 0;
  // Stage 0: every rank loaded its own slice of `slice_numel` elements (rank-major) of the
  // whole store; afterwards every rank holds all of it. In memory only.
  virtual void share_slices(dist::Comm& comm, int64_t slice_numel);
  // fp32 master elements [offset, offset + n) into dst.
  virtual void read_master(size_t offset, size_t n, float* dst) = 0;
  virtual void set_step_count(int64_t applied_steps) = 0;
  virtual StoreBytes bytes() const = 0;

  // A host store with an fp32 master: the master tensor (numel fp32, a view of its region
  // that keeps the region alive); else undefined. A host store: the optimizer, else nullptr.
  virtual torch::Tensor master() const { return {}; }
  virtual optim::ShardOptimizer* memory_optimizer() { return nullptr; }
  // A disk store's streamed optimizer, else nullptr.
  virtual TieredOptimizer* tiered() { return nullptr; }
  virtual const TieredOptimizer* tiered() const { return nullptr; }
  // "io_uring, O_DIRECT" for a disk store, "" in memory.
  virtual std::string io_description() const { return ""; }
};

// What a store is made with besides its place.
struct MasterStoreOptions {
  size_t numel = 0;  // fp32 master elements
  int threads = 1;   // the optimizer's
  // A host store: the fp32 compute parameters when they are the master (numel elements:
  // stage 0 without a 16-bit copy), else undefined and the store holds its own; the
  // optimizer's backend; where int8 blocks restart (make_shard_optimizer's segment_numel).
  torch::Tensor params_master;
  optim::OptimizerBackend backend = optim::OptimizerBackend::kFused;
  size_t segment_numel = 0;
  // A disk store: its sub-groups, streamed gradients and buffers (TieredOptimizer).
  SubGroupOptions sub_groups;
  // A host store: the split master (placement.split_master): 16-bit extensions instead of
  // an fp32 master, the copy half bound with bind_compute_copy() or bind_compute_pieces()
  // before the first step (the fused backend only).
  bool split_master = false;
};

// The store for `place`, in the tier placement::make_tier makes for it (owned by `owner`:
// "zoff_rank0"). Host memory (compute on the CPU, or offload "cpu"): the master and the
// optimizer's states are regions of a host tier, stepped in place by a ShardOptimizer (the
// torch backend keeps LibTorch's own state tensors). Disk (nvme, striped): the regions are
// files, streamed through in sub-groups by a TieredOptimizer; same kernels, same values.
std::unique_ptr<MasterStore> make_master_store(const placement::StorePlace& place,
                                               const std::string& owner,
                                               const config::Config& config,
                                               const MasterStoreOptions& options);

}  // namespace zoff::engine
