// Inference from disk: a model built without its values (defer_parameters) runs forward with
// each unit's parameters read in just before its computation and dropped just after, so a
// model larger than RAM generates text with one unit in memory at a time.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>

#include "zoff/unit/deferred_init.h"
#include "zoff/unit/unit_hooks.h"

namespace zoff::unit {

class StreamedWeights final : public UnitHooks {
 public:
  // Installs itself on `root` (whose trainable parameters are placeholders); `init` values
  // a parameter by its name under root (e.g. checkpoint::safetensors_param_init). Every
  // computation of the model must run through zoff::with_unit: a parameter read outside
  // one has no values (LibTorch refuses to read it).
  StreamedWeights(torch::nn::Module& root, ParamInit init);
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

  // Most parameter bytes in memory at once, and bytes of values loaded so far (in the
  // model's dtype, whatever the file stores).
  int64_t peak_bytes() const { return peak_; }
  int64_t read_bytes() const { return read_; }

 private:
  struct Param {
    std::string name;
    torch::Tensor tensor;
    int open = 0;  // unit scopes using it now
  };
  std::vector<Param*> params_of(const torch::nn::Module& module);

  torch::nn::Module& root_;
  ParamInit init_;
  std::map<const void*, Param> params_;  // by TensorImpl: the deferred parameters
  int64_t live_ = 0;
  int64_t peak_ = 0;
  int64_t read_ = 0;
};

}  // namespace zoff::unit
