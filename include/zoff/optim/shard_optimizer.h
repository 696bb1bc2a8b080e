// The optimizer the engine runs on this rank's shard: flat fp32 spans, nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "zoff/optim/copy_out_pieces.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::optim {

// What the optimizer writes besides the fp32 master: an optional 16-bit copy of the
// updated parameters, fused into the same pass (round to nearest even).
enum class CopyOut { kNone, kBf16, kFp16 };

// Hyper-parameters of every optimizer zoff has; each uses the fields it needs.
// Semantics follow LibTorch's torch::optim classes of the same name.
struct OptimizerOptions {
  std::string type = "adamw";  // adamw | adam | sgd | adagrad
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;               // decoupled for adamw; L2 (added to grad) for the others
  double momentum = 0.0;                   // sgd
  double dampening = 0.0;                  // sgd
  bool nesterov = false;                   // sgd
  double lr_decay = 0.0;                   // adagrad
  double initial_accumulator_value = 0.0;  // adagrad
  // adam/adamw, fused backend: how exp_avg and exp_avg_sq are stored between steps,
  // fp32 | bf16 | int8 (see state_dtype.h). The update runs in fp32 either way.
  std::string state_dtype = "fp32";
};

// States the optimizer keeps per parameter element: Adam's and AdamW's exp_avg and exp_avg_sq
// (2), SGD's momentum buffer (1 with momentum, else 0), Adagrad's sum (1).
int optimizer_state_count(const OptimizerOptions& options);

// One named state as stored, for checkpoints and tiers: `bytes` bytes at `data` (fp32: the
// floats; bf16: bf16 bit patterns, uint16 per element; int8: one code per element, int8_t
// for exp_avg and uint8_t for exp_avg_sq) and, for int8 only, `num_scales` fp32 block
// absmax scales, one per kStateBlock elements, the grid starting again at every segment
// (segment_numel elements each, the last one maybe shorter; 0: one segment, the whole
// span): segment k's scales follow segment k - 1's, state_blocks(segment_numel) each.
// Saving data and scales and copying them back restores the state exactly.
struct StoredState {
  StateDtype dtype = StateDtype::kFp32;
  void* data = nullptr;
  size_t bytes = 0;
  float* scales = nullptr;
  size_t num_scales = 0;
  size_t segment_numel = 0;
};

// One optimizer over one flat fp32 span of `numel` parameters (a rank's shard). It owns
// its state (m, v, ...). step() updates `params` in place from `grads`, using `lr` (the
// scheduler's value for this step, overriding options.lr), and writes the 16-bit copy to
// `out16` when copy_out != kNone (out16 has numel uint16 elements).
class ShardOptimizer {
 public:
  virtual ~ShardOptimizer() = default;
  virtual void step(float* params, const float* grads, double lr, CopyOut copy_out,
                    uint16_t* out16) = 0;
  // step() with the 16-bit copy scattered over `out` (out.numel() == numel(), else
  // zoff::UsageError): the same values, each written where its piece says. The fused
  // backend writes them in the same pass; this default steps into a temporary copy of
  // numel() elements and scatters it.
  virtual void step_scattered(float* params, const float* grads, double lr, CopyOut copy_out,
                              const CopyOutPieces& out);
  // The split master (split_master.h) in place of an fp32 master: one step of the masters
  // joined from `copy` (their bf16 rounding, numel() elements: contiguous, or scattered over
  // `copy_pieces`) and `ext` (their 16-bit extensions), both rewritten with the new masters.
  // Returns how many odd ties were settled. The fused backend only: the default throws
  // zoff::UsageError.
  virtual size_t step_split(uint16_t* copy, uint16_t* ext, const float* grads, double lr);
  virtual size_t step_split_scattered(const CopyOutPieces& copy_pieces, uint16_t* ext,
                                      const float* grads, double lr);
  virtual size_t numel() const = 0;
  virtual int64_t step_count() const = 0;
  // Bytes of optimizer state held (m, v, momentum buffers...), not counting params.
  virtual size_t state_bytes() const = 0;
  // Named state buffers, each numel floats, plus the step count: for checkpoints. Both
  // backends create their state at construction (the torch backend's pointers alias LibTorch's
  // own state tensors), so the pointers are valid at once and stable for the optimizer's life.
  // With bf16 or int8 states there are no float buffers: this throws zoff::Error, and
  // stored_state_buffers() is the way in.
  virtual std::map<std::string, float*> state_buffers() = 0;
  // The same states in their stored form, whatever the state dtype (fp32: state_buffers()
  // as bytes). Pointers are valid at once and stable for the optimizer's life.
  virtual std::map<std::string, StoredState> stored_state_buffers();
  virtual void set_step_count(int64_t step) = 0;
  virtual std::string name() const = 0;
};

// Which implementation runs the update: fused SIMD kernels, or LibTorch tensor ops (the
// reference path, kept selectable).
enum class OptimizerBackend { kFused, kTorch };

// Where the fused backend keeps its states instead of memory of its own: `bytes` bytes for the
// state `name` ("exp_avg"; int8 block scales as "exp_avg.scales"), 64-byte aligned, valid and
// unmoved for the optimizer's life (a host tier's regions: the master store steps them in
// place). Empty: the optimizer allocates them itself (AlignedFloats).
using StateMemory = std::function<void*(const std::string& name, size_t bytes)>;

// Creates the optimizer for `numel` parameters. Throws zoff::UsageError on an unknown
// type or a bad hyper-parameter (naming it), or compressed states with the torch backend.
// `segment_numel` (int8 states; 0: numel) restarts the int8 block grid every segment_numel
// elements, so that each segment's codes and scales stand alone: stage 0 keeps every rank's
// shard of the whole-buffer state that way, as the rank's own optimizer would at stage 1.
// The update does not depend on it otherwise (other dtypes are elementwise). `memory`: where
// the fused backend's states live (the torch backend keeps LibTorch's own state tensors).
std::unique_ptr<ShardOptimizer> make_shard_optimizer(const OptimizerOptions& options, size_t numel,
                                                     OptimizerBackend backend, int threads,
                                                     size_t segment_numel = 0,
                                                     const StateMemory& memory = {});

}  // namespace zoff::optim
