// `zoff generate`: text from a GPT checkpoint (the model is rebuilt from meta.json's preset).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "command.h"
#include "zoff/checkpoint/checkpoint.h"
#include "zoff/checkpoint/load_module.h"
#include "zoff/checkpoint/safetensors_reader.h"
#include "zoff/core/error.h"
#include "zoff/core/huge_page_tensor.h"
#include "zoff/core/huge_pages.h"
#include "zoff/core/limits.h"
#include "zoff/core/process_memory.h"
#include "zoff/models/generate.h"
#include "zoff/models/gpt.h"
#include "zoff/models/gpt_config.h"
#include "zoff/unit/streamed_weights.h"

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
  std::string stream = "auto";  // --stream-weights: auto | yes | no
  std::string dtype = "bf16";   // compute dtype: bf16 | fp32
  bool kv_cache = true;
  bool read_ahead = true;       // streamed: read the next unit while this one computes
  std::string direct = "auto";  // --direct-reads: auto | yes | no
};

torch::ScalarType compute_dtype(const GenerateArgs& a) {
  return a.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
}

// Prints each byte as it is chosen (after the prompt) and, at the end, the rate on stderr:
// the prompt's forward is counted apart from the bytes that follow it.
std::string generate_printing(models::Gpt& model, const GenerateArgs& a) {
  using Clock = std::chrono::steady_clock;
  models::GenerateOptions options;
  options.max_new_tokens = a.tokens;
  options.temperature = a.temperature;
  options.top_k = a.top_k;
  options.seed = a.seed;
  options.kv_cache = a.kv_cache;
  const auto start = Clock::now();
  Clock::time_point first;
  int64_t count = 0;
  options.on_token = [&](char byte) {
    if (count++ == 0) first = Clock::now();
    std::fputc(byte, stdout);
    std::fflush(stdout);
  };
  std::fputs(a.prompt.c_str(), stdout);
  std::fflush(stdout);
  std::string text = models::generate(model, a.prompt, options);
  const auto end = Clock::now();
  std::fputc('\n', stdout);
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (count > 0) {
    const double rest = seconds(end - first);
    std::fprintf(stderr,
                 "zoff generate: %lld bytes, %s, %s: prompt (%zu bytes) and first byte %.3f s, "
                 "then %.2f tokens/s\n",
                 static_cast<long long>(count), a.dtype.c_str(),
                 a.kv_cache ? "kv cache" : "no kv cache", a.prompt.size(), seconds(first - start),
                 count > 1 && rest > 0 ? static_cast<double>(count - 1) / rest : 0.0);
  }
  return text;
}

// Gives every deferred placeholder the compute dtype (still one element each), so that
// streamed units are read straight into it.
void retype_placeholders(torch::nn::Module& model, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    if (!unit::is_deferred(p) || p.scalar_type() == dtype) continue;
    p.set_data(unit::placeholder(p.sizes(), p.options().dtype(dtype)));
  }
}

// Every token reads every weight once from DRAM: the large ones move to huge pages
// (huge_page_tensor.h; the small ones stay where they are).
void hold_on_huge_pages(torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    if (p.nbytes() < kHugePageBytes) continue;
    p.set_data(empty_on_huge_pages(p.sizes(), p.options().requires_grad(false)).copy_(p));
  }
}

bool is_safetensors(const std::string& path) {
  const std::string ext = ".safetensors";
  return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

// The model valued whole from the file, its weights on huge pages: every token reads every
// weight once from DRAM (huge_page_tensor.h).
std::string generate_held(models::Gpt& model, const unit::ParamInit& values,
                          const GenerateArgs& a) {
  torch::NoGradGuard no_grad;
  for (const auto& item : model->named_parameters()) {
    if (!unit::is_deferred(item.value())) continue;
    auto t = torch::empty(item.value().sizes(), item.value().options().requires_grad(false));
    values(item.key(), t);
    auto held = empty_on_huge_pages(t.sizes(), t.options().dtype(compute_dtype(a)));
    item.value().set_data(held.copy_(t));
  }
  model->to(compute_dtype(a));  // the few parameters that were never deferred
  return generate_printing(model, a);
}

// Each unit read from the file as forward reaches it (and the next one read ahead).
std::string generate_streamed(models::Gpt& model, const unit::ParamInit& values, bool direct,
                              const GenerateArgs& a) {
  retype_placeholders(*model, compute_dtype(a));
  model->to(compute_dtype(a));  // the few parameters that were never deferred
  unit::StreamedWeights streamed(*model, values, a.read_ahead);
  const std::string text = generate_printing(model, a);
  std::fprintf(stderr,
               "zoff generate: weights streamed from %s (%s reads): %.1f GB of parameter values "
               "loaded, at most %.1f MB of them in memory at once; read ahead: %s (%lld "
               "parameters read ahead and used, %lld unused)\n",
               a.checkpoint.c_str(), direct ? "direct" : "buffered",
               static_cast<double>(streamed.read_bytes()) / 1e9,
               static_cast<double>(streamed.peak_bytes()) / 1e6, a.read_ahead ? "on" : "off",
               static_cast<long long>(streamed.read_ahead_hits()),
               static_cast<long long>(streamed.read_ahead_misses()));
  return text;
}

// A model file from `zoff train --save-model FILE.safetensors` or `zoff export`: the gpt is
// rebuilt from its metadata without values, then either valued whole (it fits) or run with
// each unit read from the file as forward reaches it (--stream-weights; auto: when the
// fp32 model would take more than half of the available memory). Streamed reads go around
// the page cache (--direct-reads; auto: when the file is larger than the available memory,
// so the page cache could not keep it from one token to the next anyway; a file it can
// keep is read from the cache after the first token: gpt 6.7b, 12.9 GB, 0.22 tokens/s
// buffered against 0.06 direct, 2026-11-29).
std::string generate_from_safetensors(const GenerateArgs& a) {
  checkpoint::SafetensorsFile file(a.checkpoint);
  const auto& meta = file.metadata();
  const auto field = [&](const std::string& key) {
    auto it = meta.find(key);
    return it == meta.end() ? std::string() : it->second;
  };
  ZOFF_CHECK_ARG(
      field("model") == "gpt" && !field("preset").empty(), "--checkpoint ", a.checkpoint,
      ": metadata names model '", field("model"), "' preset '", field("preset"),
      "'; zoff generate needs a gpt file written by zoff (train --save-model or export)");
  const int64_t context = field("context").empty() ? 0 : std::stoll(field("context"));
  models::Gpt model(models::gpt_preset(field("preset"), context), models::GptInit::kDeferred);
  const int64_t fp32_bytes = 4 * models::gpt_param_count(model->config());
  const int64_t available = available_memory_bytes();
  const bool stream =
      a.stream == "yes" || (a.stream == "auto" && available > 0 && fp32_bytes > available / 2);
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(a.checkpoint));
  // use_direct_reads() is false where the file system has no O_DIRECT (tmpfs).
  const bool direct =
      stream &&
      (a.direct == "yes" || (a.direct == "auto" && available > 0 && file_bytes > available)) &&
      file.use_direct_reads();
  const unit::ParamInit values = checkpoint::safetensors_param_init(*model, a.checkpoint, direct);
  return stream ? generate_streamed(model, values, direct, a) : generate_held(model, values, a);
}

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
  ZOFF_CHECK_ARG(a.stream == "auto" || a.stream == "yes" || a.stream == "no", "--stream-weights ",
                 a.stream, ": must be auto, yes or no");
  ZOFF_CHECK_ARG(a.direct == "auto" || a.direct == "yes" || a.direct == "no", "--direct-reads ",
                 a.direct, ": must be auto, yes or no");
  ZOFF_CHECK_ARG(a.dtype == "bf16" || a.dtype == "fp32", "--dtype ", a.dtype,
                 ": must be bf16 or fp32");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(a.threads > 0 ? a.threads : cores);
  if (is_safetensors(a.checkpoint)) {
    generate_from_safetensors(a);
    return;
  }
  ZOFF_CHECK_ARG(a.stream != "yes",
                 "--stream-weights yes needs a .safetensors model file "
                 "(zoff train --save-model FILE.safetensors, or zoff export)");
  const auto info = checkpoint::read_checkpoint_info(a.checkpoint);
  ZOFF_CHECK_ARG(info.model == "gpt", "checkpoint ", info.dir, " is of model '", info.model,
                 "': zoff generate needs a gpt checkpoint");
  models::Gpt model(models::gpt_preset(info.preset.empty() ? "tiny" : info.preset, info.context));
  checkpoint::load_module_from_checkpoint(*model, info.dir);
  model->to(compute_dtype(a));
  hold_on_huge_pages(*model);
  generate_printing(model, a);
}

void add_generate(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd =
      root.add_subcommand("generate", "Continue a prompt with a GPT trained by `zoff train`");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "checkpoint directory, a --save root (its `latest` is used), or a "
                  "FILE.safetensors from train --save-model or export")
      ->required();
  cmd->add_option("--prompt", args->prompt, "text to continue")->required();
  cmd->add_option("--tokens", args->tokens, "bytes to generate")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy; higher = more random")
      ->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "sample among the k likeliest bytes (0 = all)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "sampling seed")->capture_default_str();
  cmd->add_option("--threads", args->threads, "intra-op threads (0 = all cores)");
  cmd->add_option("--stream-weights", args->stream,
                  "safetensors: read each unit from the file as forward reaches it (yes), load "
                  "the model whole (no), or stream when it would take more than half of the "
                  "available memory (auto)")
      ->capture_default_str();
  cmd->add_option("--dtype", args->dtype,
                  "compute dtype: bf16 (the weights rounded once to 16 bits) or fp32")
      ->capture_default_str();
  cmd->add_flag("!--no-kv-cache", args->kv_cache,
                "recompute the whole context for every byte instead of keeping each position's "
                "keys and values");
  cmd->add_option("--direct-reads", args->direct,
                  "streamed weights read around the page cache (O_DIRECT): auto (when the file "
                  "is larger than the available memory), yes or no")
      ->capture_default_str();
  cmd->add_flag("!--no-read-ahead", args->read_ahead,
                "streamed weights: read each unit only when forward reaches it, instead of "
                "reading the next one on a reader thread while this one computes");
  cmd->callback([args, &exit_code] {
    run_generate(*args);
    exit_code = 0;
  });
}

}  // namespace
}  // namespace zoff::cli

ZOFF_REGISTER_COMMAND(generate, zoff::cli::add_generate);
