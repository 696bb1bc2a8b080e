// The optimizer step over a master copy and states that live in a tier (NVMe), streamed in
// sub-groups.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "zoff/engine/grad_window.h"
#include "zoff/engine/step_meter.h"
#include "zoff/offload/host_buffer.h"
#include "zoff/offload/tier.h"
#include "zoff/optim/span_optimizer.h"

namespace zoff::engine {

struct SubGroupOptions {
  int64_t sub_group_elems = 10000000;  // zero_optimization.sub_group_size
  // fp32 host buffers of sub_group_elems each; 0 = 3 x (1 + states). Must hold at least one
  // sub-group (1 + states buffers).
  int64_t buffer_count = 0;
  // The fp32 gradients live in a region of the tier ("grads") too, filled by
  // accumulate_grads(); the step reads each sub-group's gradients with its master and
  // states (one more buffer per sub-group) instead of taking them from host memory.
  bool grads_in_tier = false;
  // The gradients are not kept at all (offload_optimizer.gradients = "stream"): each
  // sub-group's reduced gradients go into a host buffer of a bounded window and the step
  // consumes and frees it as soon as the sub-group is complete. Needs a step begun before
  // backward (begin_step) and one accumulate_grads() per element per step (no gradient
  // accumulation, no clipping). Excludes grads_in_tier.
  bool grads_streamed = false;
  // grads_streamed: sub-group buffers the window may hold at once; 0 = enough for
  // `stream_burst_elems` beside the step's slots, at least 4 x slots and 8
  // (placement::auto_stream_buffers). Backward waits when they are all held.
  int64_t stream_buffers = 0;
  // grads_streamed: the most gradient elements backward hands over at once (this rank's
  // piece of the largest reduced bucket: stage 3, of the largest unit); 0 = unknown.
  int64_t stream_burst_elems = 0;
  // The split master (optim/split_master.h): the "master" region holds each element's
  // 16-bit extension (2 bytes, not 4), and its bf16 compute copy, the other half, is where
  // the step writes the copy: the output region (set_output_region, 2 bytes) or the memory
  // bound with set_split_copy(). Steps must copy out bf16; masters come in settled.
  bool split_master = false;
  // Longest wait of finish_step() for the worker (each I/O wait has the tier's own timeout).
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

// Owns `numel` fp32 elements of master weights and of each optimizer state as regions of a
// tier ("master", then the optimizer's state names). step() streams them through the fused
// optimizer in sub-groups of sub_group_elems elements with `slots` = buffer_count / (1 +
// states) sets of host buffers:
//   read sub-group i+1 .. i+slots-2 | update sub-group i | write back sub-group i-1
// (with 3 slots: read i+1 while updating i and writing i-1; with 2 the write of i-1 is
// waited for before i+1 is read; with 1 each sub-group is read, updated, written in turn).
// The sub-groups come in the order their gradients become final; a slot left free reads
// the master and states of the sub-group the last step took next, before it comes.
// The kernels are elementwise and the step count advances once per step, so the result
// is bit for bit the in-memory step's. Host memory: buffer_count x sub_group_elems x 4
// bytes, whatever numel is.
//
// Values come in once at start through append_master() (in element order) and states
// start at their initial values. Checkpoints stream every region with read()/write().
//
// Compressed states (options.state_dtype bf16 / int8): a state's region holds its stored
// form, state_storage_bytes' element part (2 or 1 byte per element), and the step runs the
// StateSpan kernels on it. Int8 scales (4 bytes per kStateBlock elements per state, 0.2% of
// the codes) stay in host memory, not in the tier: a sub-group's scales are a few bytes,
// far below the tier's alignment, and neighbouring sub-groups' pieces would share a block.
// Sub-groups then start on multiples of kStateBlock elements (and of the tier's alignment
// in codes), so no int8 block straddles two: with compressed states sub_group_elems is
// rounded up to a multiple of max(kStateBlock, alignment / stored element bytes) elements
// (4096 with int8 and 4 KiB alignment).
class TieredOptimizer {
 public:
  TieredOptimizer(offload::Tier& tier, const optim::OptimizerOptions& options, int threads,
                  size_t numel, SubGroupOptions sub_groups);
  ~TieredOptimizer();
  TieredOptimizer(const TieredOptimizer&) = delete;
  TieredOptimizer& operator=(const TieredOptimizer&) = delete;

  // Setup: the master's values in element order, any number of calls of any size, each
  // starting at element `offset` (checked: the next one), then finish_master() once every
  // element came (throws zoff::Error otherwise).
  void append_master(size_t offset, const float* values, size_t n);
  void finish_master();

  // One optimizer step, all at once: begin_step(), then finish_step().
  void step(const float* grads, double lr, optim::CopyOut copy_out, uint16_t* out16, float* out32);

  // One optimizer step in pieces, overlapped with whatever the caller does meanwhile
  // (backward): begin_step() fixes the step (grads: numel fp32 in host memory; the rounded
  // new master goes to out16 when copy_out != kNone; out32, when not null, receives the new
  // fp32 master); submit(g) hands sub-group g (elements [g * sub_group_elems(), ...)) to
  // the worker thread once its gradients are final, in any order; finish_step() submits
  // the sub-groups not submitted yet, in order, and waits for all (at most `timeout`).
  // Until finish_step() returns, the caller must not write grads of submitted sub-groups
  // nor touch out16/out32. Throws zoff::Error on an I/O failure (from finish_step): the
  // step is then not counted and the regions are half updated (the run must stop).
  void begin_step(const float* grads, double lr, optim::CopyOut copy_out, uint16_t* out16,
                  float* out32);
  void submit(size_t group);
  // Elements [offset, offset + n) of the gradients are final: submits each sub-group all
  // of whose elements are now final. Ranges of one step must not overlap.
  void grads_final(size_t offset, size_t n);
  void finish_step();
  // Between steps: reads the master and states of the sub-groups the next step starts with
  // (as many as there are slots) into the step's buffers now, so that a step begun later
  // (step(), or begin_step() with sub-groups submitted in order) finds them there; called
  // as backward begins, the reads overlap it. Gradients are read by the step itself. Range
  // copies (read(), write()), append_master() and set_output_region() discard what was read.
  void prefetch();

  // grads_in_tier: adds `piece` (n fp32 values, a reduced bucket's shard range) into the
  // gradient region at element `offset` (read, add, write back, in aligned windows), or
  // replaces what is there when `first` (the first micro-batch since the last step).
  // grads_streamed: copies the piece into its sub-groups' window buffers (`first` must
  // hold: each element comes once per step) and submits each sub-group whose elements
  // have all come, during the step begun with begin_step(). When
  // `divide_by` > 1 the resulting values are divided by it (the mean over ranks, the same
  // tensor division the in-memory path does). Returns the sum of the squares of the
  // resulting values (for the gradient norm). Synchronous; calls must not overlap each
  // other, but may overlap a step whose sub-groups in the range were not submitted yet.
  double accumulate_grads(size_t offset, const float* piece, size_t n, bool first, int divide_by);
  // grads_in_tier: the gradients of the next step are multiplied by `coef` as each
  // sub-group is read (gradient clipping; the same float multiply as in memory). Reset to
  // 1 by finish_step().
  void set_grad_scale(double coef);
  bool grads_in_tier() const { return grads_region_ != nullptr; }
  bool grads_streamed() const { return window_ != nullptr; }
  // Ends a step without submitting more: waits for the sub-groups already submitted, does
  // not count the step. The regions then mix old and new values.
  void abandon_step();
  bool in_step() const { return job_.active; }
  size_t groups() const;

  // Writes the compute-dtype copy of each updated sub-group into `region` (shard-space
  // order, `element_bytes` per element: 2 for bf16/fp16 copy-out, 4 for fp32) instead of
  // out16/out32: the stage-3 parameter pieces on disk. nullptr: back to out16/out32.
  void set_output_region(offload::TierRegion* region, size_t element_bytes);

  // split_master without an output region: the compute copy (numel bf16 elements, host
  // memory, alive as long as this) that each step reads and rewrites and that read() and
  // write() of the master join and split. Steps must write their copy there.
  void set_split_copy(uint16_t* copy);
  // Where the step counts its sub-groups and its waits for the disk, and streamed gradients
  // their waits for a window buffer (may be null).
  void set_meter(StepMeter* meter) { meter_ = meter; }
  bool split_master() const { return split_; }
  // split_master: master elements the steps so far settled (odd ties moved one ulp).
  uint64_t settled_count() const { return settled_; }

  // Region names: "master", then the optimizer's states (optimizer().states()).
  std::vector<std::string> region_names() const;
  // Synchronous element-range copies of one region, any offset and size, streamed through
  // one sub-group buffer (never more in memory). Elements are as stored: fp32 for the
  // master (with the split master, joined from and split into the copy and the extension),
  // region_element_bytes() each for a state (bf16 bits, int8 codes).
  void read(size_t region, size_t offset, size_t n, void* dst);
  void write(size_t region, size_t offset, size_t n, const void* src);
  size_t region_element_bytes(size_t region) const { return region == 0 ? 4 : state_bytes_; }
  // Int8 states: state `state`'s block scales (optim::state_blocks(numel()) floats, host
  // memory).
  bool has_scales() const { return !scales_.empty(); }
  float* scales(size_t state) { return scales_.at(state).data(); }
  size_t num_scales() const { return scales_.empty() ? 0 : scales_.front().size(); }

  size_t numel() const { return numel_; }
  optim::SpanOptimizer& optimizer() { return optimizer_; }
  const optim::SpanOptimizer& optimizer() const { return optimizer_; }
  int64_t sub_group_elems() const { return group_; }
  int slots() const { return static_cast<int>(slots_.size()); }
  size_t host_bytes() const;        // the staging buffers, the gradient window, scale_bytes()
  size_t scale_bytes() const;       // int8 states' block scales (host memory), else 0
  size_t disk_bytes() const;        // the regions, master included
  size_t state_disk_bytes() const;  // the optimizer states' regions
  size_t grad_disk_bytes() const;   // the gradient region (grads_in_tier), else 0

 private:
  struct Slot;
  struct PipelineState;
  struct Job {  // the step in progress
    const float* grads = nullptr;
    optim::CopyOut copy_out = optim::CopyOut::kNone;
    uint16_t* out16 = nullptr;
    float* out32 = nullptr;
    bool active = false;
  };
  offload::TierRegion* out_region_ = nullptr;
  size_t out_bytes_ = 0;  // bytes per element of out_region_
  size_t group_size(size_t g) const;
  uint64_t region_offset(size_t region, size_t g) const;
  void issue_read(size_t g, Slot& slot);
  void issue_state_reads(size_t g, Slot& slot);
  void discard_prefetch();
  void update(size_t g, Slot& slot);
  void update_split(size_t g, Slot& slot, const float* grads);
  void update_fp32(size_t g, Slot& slot, const float* grads);
  std::vector<optim::StateSpan> state_spans(size_t g, Slot& slot);
  void issue_write(size_t g, Slot& slot);
  void wait_all();
  void worker_loop();
  void run_pipeline();
  void read_ahead(PipelineState& st);
  Slot* claim_slot(size_t g, const PipelineState& st);
  bool next_group(bool block, size_t* g);
  bool close_and_wait();
  void check_regions() const;
  // Bytes per element of region r on disk (the split master's: 2).
  size_t stored_bytes(size_t region) const;
  void* region_buffer(Slot& slot, size_t region);
  uint16_t* split_copy_of(size_t g, Slot& slot);
  void read_split_master(size_t offset, size_t n, float* dst);
  void write_split_master(size_t offset, size_t n, const float* src);
  // The bf16 copy of sub-group g outside a step: in memory, or read from the output
  // region into `buffer` (group elements).
  uint16_t* group_copy(size_t g, uint16_t* buffer);
  void fill_states();
  double stream_grads(size_t offset, const float* piece, size_t n, int divide_by);
  void zero_unstreamed();
  const float* group_grads(size_t g, Slot& slot);
  template <class Copy>
  void stream_range(size_t region, size_t offset, size_t n, bool write_back, const Copy& copy);

  offload::Tier& tier_;
  optim::SpanOptimizer optimizer_;
  size_t state_bytes_;  // bytes per stored state element: 4 fp32, 2 bf16, 1 int8
  size_t numel_;
  bool split_ = false;              // split_master
  uint16_t* split_copy_ = nullptr;  // split_master: the copy in memory (set_split_copy)
  uint64_t settled_ = 0;            // split_master: settled_count() (the worker adds)
  StepMeter* meter_ = nullptr;      // set_meter
  int64_t group_;  // elements per sub-group, a multiple of the tier's alignment in floats
  std::vector<std::unique_ptr<offload::TierRegion>> regions_;  // master, then states
  std::unique_ptr<offload::TierRegion> grads_region_;          // grads_in_tier only
  std::vector<std::vector<float>> scales_;  // int8 only: per state, one per kStateBlock
  offload::HostBuffer grads_window_;        // accumulate_grads' read-add-write window
  std::unique_ptr<GradWindow> window_;      // grads_streamed only
  offload::HostBuffer zeros_;               // grads_streamed: a sub-group's zero gradients
  double grad_scale_ = 1.0;
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t appended_ = 0;  // master elements written so far by append_master

  // The worker thread runs the pipeline of each step over the sub-groups submitted to it.
  Job job_;
  std::thread worker_;
  std::mutex mutex_;
  std::condition_variable wake_;      // to the worker: a step began, a group came, closing
  std::condition_variable finished_;  // to finish_step(): the worker is done with the step
  std::deque<size_t> queue_;          // submitted, not yet taken by the worker
  std::vector<bool> submitted_;       // per sub-group, this step
  std::vector<size_t> final_elems_;   // per sub-group, elements made final by grads_final
  // grads_streamed: per sub-group, the [begin, end) element ranges (within it) streamed
  // this step; the rest of a sub-group that closes incomplete is zeroed (zero_unstreamed).
  std::vector<std::vector<std::pair<size_t, size_t>>> streamed_;
  bool closing_ = false;      // finish_step() was called: no more groups
  bool running_ = false;      // the worker is inside run_pipeline()
  bool stop_ = false;         // destructor
  std::exception_ptr error_;  // what the worker threw this step
  // The order the last completed step took its sub-groups in (backward's, for an overlapped
  // step): the step reads the next ones' master and states ahead in that order.
  std::vector<size_t> order_;
  std::chrono::milliseconds timeout_;
};

}  // namespace zoff::engine
