// A training task: a model, its data and its loss, for the examples `zoff train` knows.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "zoff/data/dataset.h"
#include "zoff/unit/deferred_init.h"

namespace zoff::train {

// Everything the training loop needs from an example, and nothing of the engine: the
// module is an ordinary LibTorch module.
class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<torch::nn::Module> module() = 0;
  virtual const data::Dataset& train_set() const = 0;
  // Forward pass and the mean loss over the batch (a scalar).
  virtual torch::Tensor loss(const data::Batch& batch) = 0;
  // Tokens per sample for language models (throughput in tokens/s), 0 otherwise.
  virtual int64_t tokens_per_sample() const { return 0; }
  // Metrics on held-out data (e.g. "val_loss", "accuracy"); empty when there is none.
  virtual std::map<std::string, double> evaluate() { return {}; }
  // Text generated from `prompt` (language models only; "" otherwise).
  virtual std::string sample(const std::string& prompt, int64_t tokens, uint64_t seed) {
    return "";
  }
  // With TaskOptions::deferred_init, the values of the module's placeholder parameters
  // (unit/deferred_init.h), for EngineOptions::param_init; empty when nothing is deferred.
  virtual unit::ParamInit param_init() const { return {}; }
};

struct TaskOptions {
  std::string model = "mlp";  // mlp | gpt | cnn
  std::string preset;         // model size; "" = the model's default
  uint64_t seed = 0;          // initial weights (via torch::manual_seed) and data
  // gpt: recompute each block's forward in backward instead of keeping its activations.
  bool activation_checkpointing = false;
  // Samples per evaluation forward: `zoff train` passes the micro-batch, so evaluating
  // never needs more activation memory than a training step.
  int64_t eval_batch = 4;
  // Training data (zoff train --data): gpt a text file or a directory of text files, cnn a
  // directory of Fashion-MNIST-style IDX files (gzip or not); "" = Debian's fortunes /
  // Fashion-MNIST. mlp trains on generated data and refuses a path.
  std::string data_path = "";
  // gpt: tokens per training window instead of the preset's context (0 keeps it).
  int64_t context = 0;
  // gpt: build the module without its values (placeholders, one block in memory at a time
  // during construction); param_init() makes them, bit for bit the eager model's. Other
  // models ignore it (they are small).
  bool deferred_init = false;
  // gpt: this many blocks instead of the preset's (0 keeps it): sizes between presets, for
  // baselines (zoff train --layers).
  int64_t layers = 0;
  // gpt: the attention kernel, "auto", "materialized" or "flash" (models::AttentionKernel).
  std::string attention = "auto";
};

// Builds the task; an unknown model or preset is a UsageError listing the valid names.
// Call with the same options on every rank: weights come out identical.
std::unique_ptr<Task> make_task(const TaskOptions& options);

// The model names make_task knows, for help texts.
constexpr const char* kTaskModels = "mlp, gpt, cnn";

}  // namespace zoff::train
