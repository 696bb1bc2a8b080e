// Inference from disk: a model built without its values (defer_parameters) runs forward with
// each unit's parameters read in just before its computation and dropped just after, so a
// model larger than RAM generates text with one unit in memory at a time; with read-ahead,
// the next unit is read on a reader thread while this one computes (two units in memory).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "zoff/unit/deferred_init.h"
#include "zoff/unit/unit_hooks.h"

namespace zoff::unit {

// How long a unit's forward waits for the reader thread before giving up (a read of one
// unit, ~0.4 GB for a 6.7b block, takes seconds even from a slow disk).
constexpr std::chrono::seconds kReadAheadTimeout{600};

class StreamedWeights final : public UnitHooks {
 public:
  // Installs itself on `root` (whose trainable parameters are placeholders); `init` values
  // a parameter by its name under root (e.g. checkpoint::safetensors_param_init). Every
  // computation of the model must run through zoff::with_unit: a parameter read outside
  // one has no values (LibTorch refuses to read it).
  //
  // read_ahead: once a unit has been followed by another (after the same predecessor, so
  // that a unit entered twice per forward, like a tied embedding, is told apart), entering
  // it starts reading that successor on a reader thread. `init` must then be safe on
  // another thread, and should run no LibTorch kernels there (they would compete with the
  // compute thread's OpenMP team): safetensors_param_init reads straight into the values.
  StreamedWeights(torch::nn::Module& root, ParamInit init, bool read_ahead = false);
  ~StreamedWeights() override;
  StreamedWeights(const StreamedWeights&) = delete;
  StreamedWeights& operator=(const StreamedWeights&) = delete;

  // Values the module's parameters not already in memory (nested or repeated units keep
  // one copy, counted per parameter).
  void before_forward(const torch::nn::Module& module) override;
  // Drops the values of parameters no open unit uses any more.
  void after_forward(const torch::nn::Module& module) override;
  // Inference only: a zoff::Error (run under torch::NoGradGuard).
  void before_backward(const torch::nn::Module& module) override;

  // Most parameter bytes in memory at once (spare buffers included), and bytes of values loaded so
  // far (in the model's dtype, whatever the file stores).
  int64_t peak_bytes() const { return peak_; }
  int64_t read_bytes() const { return read_; }
  // Parameters valued from a read-ahead (hits), and read ahead but dropped unused (misses).
  int64_t read_ahead_hits() const { return hits_; }
  int64_t read_ahead_misses() const { return misses_; }

 private:
  struct Param {
    std::string name;
    torch::Tensor tensor;
    int open = 0;          // unit scopes using it now
    torch::Tensor ahead;   // values read ahead of its unit (set by the reader thread)
    torch::Tensor values;  // what `tensor` holds while its unit is open (our handle on it)
  };
  using UnitKey = std::pair<const torch::nn::Module*, const torch::nn::Module*>;

  std::vector<Param*> params_of(const torch::nn::Module& module);
  void finish_reading();
  void read_ahead_after(const torch::nn::Module& module);
  void drop_unused_ahead();
  torch::Tensor buffer_for(const Param& p);
  bool recycle(torch::Tensor values);

  torch::nn::Module& root_;
  ParamInit init_;
  bool read_ahead_;
  std::map<const void*, Param> params_;  // by TensorImpl: the deferred parameters
  // (unit entered before, unit entered) -> the unit entered after them last time.
  std::map<UnitKey, const torch::nn::Module*> next_;
  const torch::nn::Module* before_ = nullptr;   // the unit entered before current_
  const torch::nn::Module* current_ = nullptr;  // the unit entered last
  std::future<void> reading_;                   // the reader thread's one pending read
  std::vector<Param*> being_read_;              // what it reads (its `ahead`s)
  // Buffers of dropped units, flat, by (elements, dtype), reused for the next units' values
  // (a gpt's blocks share shapes): a fresh allocation costs a page fault and the kernel's
  // zeroing per 4 KiB, as much time as reading the values from the page cache. At most the
  // largest unit's bytes are kept.
  std::map<std::pair<int64_t, c10::ScalarType>, std::vector<torch::Tensor>> spare_;
  int64_t spare_bytes_ = 0;
  int64_t largest_unit_ = 0;
  int64_t live_ = 0;
  int64_t peak_ = 0;
  int64_t read_ = 0;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace zoff::unit
