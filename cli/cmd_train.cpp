// `zoff train`: trains an example model with the ZeRO engine (or the plain-LibTorch reference).
#include <charconv>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "command.h"
#include "zoff/models/gpt_config.h"
#include "zoff/train/task.h"
#include "zoff/train/trainer.h"

namespace {

// CLI11 turns an integer beyond the type into the type's limit and "-1" for an unsigned into
// a huge value (a probe trained for 2^63 steps): the text is checked before it converts.
template <typename Int>
CLI::Validator whole_number_text(Int min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        Int value{};
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (ec != std::errc() || end != text.data() + text.size() || value < min) {
          return text + ": must be a whole number in [" + std::to_string(min) + ", " +
                 std::to_string(std::numeric_limits<Int>::max()) + "]";
        }
        return "";
      },
      "INT");
}

// What to train: the model, its size, the config, the data and the seed.
void add_model_options(CLI::App* cmd, zoff::train::TrainOptions* opts) {
  cmd->add_option("--model", opts->model, std::string("model: ") + zoff::train::kTaskModels)
      ->capture_default_str();
  cmd->add_option("--preset", opts->preset,
                  std::string("model size (gpt: ") + zoff::models::kGptPresetNames + ")");
  cmd->add_option("--context", opts->context,
                  "gpt: tokens per training window instead of the preset's context")
      ->check(whole_number_text<int64_t>(1));
  cmd->add_option("--layers", opts->layers,
                  "gpt: blocks instead of the preset's (sizes between presets, for baselines; "
                  "not with --save, --resume or --save-model)")
      ->check(whole_number_text<int64_t>(1));
  cmd->add_option("--attention", opts->attention,
                  "gpt: attention kernel: auto (flash for long bf16 windows where the CPU "
                  "multiplies bf16 natively), materialized or flash")
      ->check(CLI::IsMember({"auto", "materialized", "flash"}))
      ->capture_default_str();
  cmd->add_option("--config", opts->config_path, "DeepSpeed-style JSON config")->required();
  cmd->add_option("--steps", opts->steps, "optimizer steps")
      ->check(whole_number_text<int64_t>(1))
      ->capture_default_str();
  cmd->add_option("--data", opts->data_path,
                  "gpt: a text file or a directory of them; cnn: a directory of IDX files "
                  "(gzip or not); default: Debian's fortunes / Fashion-MNIST");
  cmd->add_option("--seed", opts->seed, "seed for weights and data order")
      ->check(whole_number_text<uint64_t>(0))
      ->capture_default_str();
}

// How to run: logging, the baseline, the optimizer backend, threads, evaluation, timeouts.
void add_run_options(CLI::App* cmd, zoff::train::TrainOptions* opts) {
  cmd->add_option("--log", opts->log_path, "write one JSON object per step to this file");
  cmd->add_flag("--reference", opts->reference,
                "train with plain LibTorch (no zoff engine, world size 1) as a baseline");
  cmd->add_flag("--activation-checkpointing", opts->activation_checkpointing,
                "gpt: recompute each block's forward in backward (less activation memory)");
  cmd->add_option("--optimizer-backend", opts->optimizer_backend,
                  "fused (zoff's SIMD kernels) or torch (LibTorch optimizers on the shard)")
      ->capture_default_str();
  cmd->add_option("--threads", opts->threads, "intra-op threads per rank (0 = auto)");
  cmd->add_option("--eval-every", opts->eval_every, "steps between evaluations (0 = per epoch)");
  cmd->add_flag("--no-eval", opts->no_eval,
                "no evaluation, not even at the end (each is a forward over the whole "
                "validation split)");
  cmd->add_option("--comm-timeout", opts->comm_timeout_s, "seconds before a collective fails")
      ->capture_default_str();
  cmd->add_option("--heartbeat-timeout", opts->heartbeat_timeout_s,
                  "seconds without a heartbeat before a rank counts as stopped or wedged and "
                  "the run fails naming it (several ranks; 0 = off)")
      ->check(whole_number_text<int64_t>(0))
      ->capture_default_str();
}

// What to write: a sample, the trained model, checkpoints (and where to start from), profiles.
void add_output_options(CLI::App* cmd, zoff::train::TrainOptions* opts) {
  cmd->add_option("--sample", opts->sample_prompt,
                  "gpt: generate text from this prompt at the end");
  cmd->add_option("--sample-tokens", opts->sample_tokens, "gpt: bytes to generate")
      ->capture_default_str();
  cmd->add_option("--save-model", opts->save_model_path,
                  "write the trained parameters here at the end: FILE.safetensors streams "
                  "them one stage-3 unit at a time (compute dtype; zoff generate reads it), "
                  "any other name gets a torch::save archive of the whole model");
  cmd->add_option("--save", opts->save_dir, "checkpoint root: DIR/step_<N>/ and DIR/latest");
  cmd->add_option("--save-every", opts->save_every, "steps between checkpoints (0 = at the end)");
  cmd->add_option("--resume", opts->resume_dir, "continue from a checkpoint (dir or --save root)");
  cmd->add_option("--init-from", opts->init_from,
                  "start from these weights: a .safetensors file (zoff export) or a checkpoint "
                  "directory (fine-tuning; the optimizer starts fresh)");
  cmd->add_option("--profile", opts->profile_path,
                  "write a per-op CPU profile (self and total ms per step, rank 0's main "
                  "thread) of --profile-steps steps after 3 warm-up steps to this file; "
                  "{rank} in the file name: every rank writes its own");
  cmd->add_option("--step-progress", opts->step_progress_s,
                  "seconds between progress lines inside a long step (stage 3 units, disk "
                  "step sub-groups, I/O wait; 0 = none)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--profile-steps", opts->profile_steps, "steps --profile covers")
      ->check(whole_number_text<int64_t>(1))
      ->capture_default_str();
}

void add_train(CLI::App& root, int& exit_code) {
  auto opts = std::make_shared<zoff::train::TrainOptions>();
  auto* cmd = root.add_subcommand("train", "train an example model (mlp, gpt, cnn) with zoff");
  add_model_options(cmd, opts.get());
  add_run_options(cmd, opts.get());
  add_output_options(cmd, opts.get());
  cmd->callback([opts, &exit_code] {
    auto summary = zoff::train::run_training(*opts);
    if (!summary.sample.empty()) {
      std::printf("--- sample ---\n%s\n--------------\n", summary.sample.c_str());
    }
    std::printf("done: %lld steps in %.1f s, final loss %.4f\n",
                static_cast<long long>(summary.steps), summary.seconds, summary.final_loss);
    exit_code = 0;
  });
}

}  // namespace

ZOFF_REGISTER_COMMAND(train, add_train);
