// The example tasks: mlp on a synthetic regression, gpt on fortunes, cnn on Fashion-MNIST.
#include "zoff/train/task.h"

#include "zoff/core/error.h"
#include "zoff/data/fashion_mnist.h"
#include "zoff/data/fortunes_text.h"
#include "zoff/data/synthetic_regression.h"
#include "zoff/models/fashion_cnn.h"
#include "zoff/models/generate.h"
#include "zoff/models/gpt.h"
#include "zoff/models/mlp.h"

namespace zoff::train {
namespace {

// Mean squared error regression of a seeded random teacher network.
class MlpTask : public Task {
 public:
  MlpTask(const std::string& preset, uint64_t seed) {
    std::vector<int64_t> hidden;
    if (preset.empty() || preset == "tiny") {
      hidden = {64, 64};
    } else if (preset == "small") {
      hidden = {1024, 1024, 1024};
    } else {
      throw UsageError("mlp: unknown preset '" + preset + "' (valid: tiny, small)");
    }
    data::SyntheticRegressionOptions d;
    d.seed = seed + 1;
    data_ = std::make_shared<data::SyntheticRegression>(d);
    model_ = models::Mlp(models::MlpOptions(d.in_dim, hidden, d.out_dim));
  }
  std::string name() const override { return "mlp"; }
  std::shared_ptr<torch::nn::Module> module() override { return model_.ptr(); }
  const data::Dataset& train_set() const override { return *data_; }
  torch::Tensor loss(const data::Batch& b) override {
    // In fp32, as torch.autocast computes losses (the outputs are cast, not the model).
    return torch::mse_loss(model_(b.inputs.to(dtype())).to(torch::kFloat32), b.targets);
  }

 private:
  torch::ScalarType dtype() { return model_->parameters().front().scalar_type(); }
  std::shared_ptr<data::SyntheticRegression> data_;
  models::Mlp model_{nullptr};
};

// Most blocks --layers accepts (more than any published GPT).
constexpr int64_t kMaxGptLayers = 1024;

// Byte-level language model on the text of Debian's fortunes.
class GptTask : public Task {
 public:
  GptTask(const std::string& preset, bool activation_checkpointing, int64_t eval_batch,
          const std::string& data_path, int64_t context, bool deferred, int64_t layers,
          const std::string& attention)
      : eval_batch_(eval_batch) {
    ZOFF_CHECK_ARG(eval_batch >= 1, "gpt: evaluation batch = ", eval_batch, ": must be >= 1");
    auto cfg = models::gpt_preset(preset.empty() ? "tiny" : preset, context);
    ZOFF_CHECK_ARG(layers >= 0 && layers <= kMaxGptLayers, "--layers ", layers, ": must be in [1, ",
                   kMaxGptLayers, "] (0 = the preset's)");
    if (layers > 0) cfg.n_layer = layers;
    cfg.attention = models::parse_attention_kernel(attention);
    split_ = data::load_fortunes(data_path.empty() ? data::kFortunesDefaultDir : data_path,
                                 cfg.block_size);
    model_ = models::Gpt(cfg, deferred ? models::GptInit::kDeferred : models::GptInit::kEager);
    model_->set_activation_checkpointing(activation_checkpointing);
    if (deferred) param_init_ = model_->initializer();
  }
  std::string name() const override { return "gpt"; }
  unit::ParamInit param_init() const override { return param_init_; }
  std::shared_ptr<torch::nn::Module> module() override { return model_.ptr(); }
  const data::Dataset& train_set() const override { return *split_.train; }
  torch::Tensor loss(const data::Batch& b) override {
    return models::gpt_loss(model_(b.inputs), b.targets);
  }
  int64_t tokens_per_sample() const override { return split_.train->seq_len(); }
  std::map<std::string, double> evaluate() override {
    // A fixed slice of the validation text: comparable from step to step.
    // In batches of eval_batch_ windows (all of equal length: the mean over all tokens is
    // the size-weighted mean of the batch means).
    torch::NoGradGuard no_grad;
    const int64_t n = std::min<int64_t>(kValSamples, split_.val->size());
    double sum = 0.0;
    for (int64_t start = 0; start < n; start += eval_batch_) {
      std::vector<int64_t> idx;
      for (int64_t i = start; i < std::min(n, start + eval_batch_); ++i) idx.push_back(i);
      sum += loss(split_.val->get(idx)).item<double>() * static_cast<double>(idx.size());
    }
    return {{"val_loss", sum / static_cast<double>(n)}};
  }
  std::string sample(const std::string& prompt, int64_t tokens, uint64_t seed) override {
    models::GenerateOptions options;  // the KV cache, as zoff generate
    options.max_new_tokens = tokens;
    options.temperature = kSampleTemperature;
    options.top_k = kSampleTopK;
    options.seed = seed;
    return models::generate(model_, prompt, options);
  }

 private:
  static constexpr int64_t kValSamples = 32;
  static constexpr double kSampleTemperature = 0.8;
  static constexpr int64_t kSampleTopK = 40;
  int64_t eval_batch_;
  data::FortunesSplit split_;
  models::Gpt model_{nullptr};
  unit::ParamInit param_init_;
};

// Image classification on Fashion-MNIST; accuracy on the 10k test images.
class CnnTask : public Task {
 public:
  CnnTask(const std::string& preset, const std::string& data_path) {
    ZOFF_CHECK_ARG(preset.empty() || preset == "default", "cnn: unknown preset '", preset,
                   "' (valid: default)");
    split_ = data_path.empty() ? data::load_fashion_mnist() : data::load_fashion_mnist(data_path);
    model_ = models::FashionCnn();
  }
  std::string name() const override { return "cnn"; }
  std::shared_ptr<torch::nn::Module> module() override { return model_.ptr(); }
  const data::Dataset& train_set() const override { return *split_.train; }
  torch::Tensor loss(const data::Batch& b) override {
    auto logits = model_(b.inputs.to(dtype()));
    return torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), b.targets);
  }
  std::map<std::string, double> evaluate() override {
    torch::NoGradGuard no_grad;
    const int64_t n = split_.test->size();
    int64_t correct = 0;
    double loss_sum = 0;
    for (int64_t start = 0; start < n; start += kEvalBatch) {
      std::vector<int64_t> idx;
      for (int64_t i = start; i < std::min(n, start + kEvalBatch); ++i) idx.push_back(i);
      auto b = split_.test->get(idx);
      auto logits = model_(b.inputs.to(dtype())).to(torch::kFloat32);
      loss_sum += torch::nn::functional::cross_entropy(
                      logits, b.targets,
                      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                      .item<double>();
      correct += logits.argmax(1).eq(b.targets).sum().item<int64_t>();
    }
    return {{"test_accuracy", static_cast<double>(correct) / static_cast<double>(n)},
            {"test_loss", loss_sum / static_cast<double>(n)}};
  }

 private:
  torch::ScalarType dtype() { return model_->parameters().front().scalar_type(); }
  static constexpr int64_t kEvalBatch = 1000;
  data::FashionMnistSplit split_;
  models::FashionCnn model_{nullptr};
};

}  // namespace

std::unique_ptr<Task> make_task(const TaskOptions& options) {
  torch::manual_seed(options.seed);
  ZOFF_CHECK_ARG(options.context == 0 || options.model == "gpt", "--context ", options.context,
                 ": model '", options.model, "' has no context (--context is for gpt)");
  ZOFF_CHECK_ARG(options.layers == 0 || options.model == "gpt", "--layers ", options.layers,
                 ": model '", options.model, "' has no blocks to count (--layers is for gpt)");
  ZOFF_CHECK_ARG(options.attention == "auto" || options.model == "gpt", "--attention ",
                 options.attention, ": model '", options.model,
                 "' has no attention (--attention is for gpt)");
  if (options.model == "mlp") {
    ZOFF_CHECK_ARG(options.data_path.empty(), "--data ", options.data_path,
                   ": mlp trains on generated data (--data is for gpt and cnn)");
    return std::make_unique<MlpTask>(options.preset, options.seed);
  }
  if (options.model == "gpt") {
    return std::make_unique<GptTask>(options.preset, options.activation_checkpointing,
                                     options.eval_batch, options.data_path, options.context,
                                     options.deferred_init, options.layers, options.attention);
  }
  ZOFF_CHECK_ARG(!options.activation_checkpointing, "activation checkpointing: model '",
                 options.model, "' has no blocks to checkpoint (gpt has)");
  if (options.model == "cnn") return std::make_unique<CnnTask>(options.preset, options.data_path);
  throw UsageError("unknown model '" + options.model + "' (valid: " + kTaskModels + ")");
}

}  // namespace zoff::train
