// `zoff generate`: text from a GPT checkpoint (the model is rebuilt from meta.json's preset).
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "command.h"
#include "zoff/checkpoint/checkpoint.h"
#include "zoff/checkpoint/load_module.h"
#include "zoff/core/error.h"
#include "zoff/core/limits.h"
#include "zoff/models/generate.h"
#include "zoff/models/gpt.h"
#include "zoff/models/gpt_config.h"

namespace zoff::cli {
namespace {

struct GenerateArgs {
  std::string checkpoint;
  std::string prompt;
  int64_t tokens = 200;
  double temperature = 0.8;
  int64_t top_k = 40;
  uint64_t seed = 0;
  int threads = 0;
};

void run_generate(const GenerateArgs& a) {
  // Check what we can before building a model that may be large.
  ZOFF_CHECK_ARG(!a.prompt.empty(), "--prompt is empty: give some text to continue");
  ZOFF_CHECK_ARG(a.tokens >= 0 && a.tokens <= models::kMaxGenerateTokens, "--tokens ", a.tokens,
                 ": must be in [0, ", models::kMaxGenerateTokens, "]");
  ZOFF_CHECK_ARG(std::isfinite(a.temperature) && a.temperature >= 0.0, "--temperature ",
                 a.temperature, ": must be a finite number >= 0");
  ZOFF_CHECK_ARG(a.top_k >= 0, "--top-k ", a.top_k, ": must be >= 0 (0 = all)");
  ZOFF_CHECK_ARG(a.threads >= 0 && a.threads <= kMaxThreads, "--threads ", a.threads,
                 ": must be in [1, ", kMaxThreads, "] (0 = all cores)");
  const auto info = checkpoint::read_checkpoint_info(a.checkpoint);
  ZOFF_CHECK_ARG(info.model == "gpt", "checkpoint ", info.dir, " is of model '", info.model,
                 "': zoff generate needs a gpt checkpoint");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(a.threads > 0 ? a.threads : cores);
  models::Gpt model(models::gpt_preset(info.preset.empty() ? "tiny" : info.preset, info.context));
  checkpoint::load_module_from_checkpoint(*model, info.dir);
  const std::string text =
      models::generate(model, a.prompt, a.tokens, a.temperature, a.top_k, a.seed);
  std::printf("%s%s\n", a.prompt.c_str(), text.c_str());
}

void add_generate(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd =
      root.add_subcommand("generate", "Continue a prompt with a GPT trained by `zoff train`");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "checkpoint directory, or a --save root (its `latest` is used)")
      ->required();
  cmd->add_option("--prompt", args->prompt, "text to continue")->required();
  cmd->add_option("--tokens", args->tokens, "bytes to generate")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy; higher = more random")
      ->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "sample among the k likeliest bytes (0 = all)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--threads", args->threads, "intra-op threads (0 = all cores)");
  cmd->callback([args, &exit_code] {
    run_generate(*args);
    exit_code = 0;
  });
}

}  // namespace
}  // namespace zoff::cli

ZOFF_REGISTER_COMMAND(generate, zoff::cli::add_generate);
