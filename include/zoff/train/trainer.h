// The training loop behind `zoff train`: engine (or plain LibTorch) + task + logs.
#pragma once

#include <cstdint>
#include <string>

namespace zoff::train {

struct TrainOptions {
  std::string model = "mlp";
  std::string preset;
  std::string config_path;  // DeepSpeed-style JSON
  int64_t steps = 100;      // optimizer steps
  uint64_t seed = 0;
  std::string log_path;  // JSONL, one object per optimizer step (rank 0 writes it)
  // Train with plain LibTorch (model->parameters(), torch::optim), world size 1: the
  // independent baseline the engine is compared against.
  bool reference = false;
  std::string optimizer_backend = "fused";  // fused | torch (LibTorch ops on the shard)
  int threads = 0;                          // intra-op threads; 0 = $ZOFF_NUM_THREADS or all cores
  int64_t eval_every = 0;  // steps between evaluations; 0 = once per epoch and at the end
  // Skip every evaluation, the one at the end too (each is a forward over the whole
  // validation split: long when every forward reads the model from disk).
  bool no_eval = false;
  int64_t comm_timeout_s = 300;  // every collective gives up after this
  // Multi-rank runs: a rank whose heartbeat (dist/heartbeat.h) has not advanced for this long
  // (SIGSTOPped, wedged) fails the run naming it. 0 = no heartbeat.
  int64_t heartbeat_timeout_s = 60;
  std::string data_path;      // --data: see TaskOptions::data_path ("" = the model's default)
  std::string sample_prompt;  // gpt: print generated text after training
  int64_t sample_tokens = 200;
  // Rank 0 writes the trained module's parameters here at the end (torch::save format,
  // names as in named_parameters(); load with torch::load / torch.jit-free
  // torch::serialize::InputArchive).
  std::string save_model_path;
  // Checkpoints: every save_every steps (and at the end) into save_dir/step_<N>/, with
  // save_dir/latest naming the newest. resume_dir: a checkpoint dir or a save_dir root.
  std::string save_dir;
  int64_t save_every = 0;
  std::string resume_dir;
  // gpt: recompute each block in backward (also on with the config's
  // activation_checkpointing section).
  bool activation_checkpointing = false;
  // gpt: train at this context (tokens per window) instead of the preset's; 0 keeps it.
  int64_t context = 0;
  // gpt: this many blocks instead of the preset's (0 keeps it). Sizes between presets, for
  // baselines; not recorded in checkpoints or model files, so refused with them.
  int64_t layers = 0;
  // gpt: the attention kernel, "auto", "materialized" or "flash" (models::AttentionKernel).
  std::string attention = "auto";
  // Start from these weights instead of the seed's (fine-tuning): a .safetensors file
  // (e.g. from zoff export) or a checkpoint directory; every tensor of the model by name.
  std::string init_from;
  // Per-op profile (train/op_profile.h) of profile_steps steps after kProfileWarmupSteps,
  // written by rank 0 to this file as a table ("" = no profile).
  std::string profile_path;
  int64_t profile_steps = 5;
  // The leader, with the zoff engine: while a step runs, its progress every this many
  // seconds on stderr (units, sub-groups, I/O wait; train/step_ticker.h). 0 = never.
  double step_progress_s = 10.0;
};

// Steps a profile waits for (allocator and caches warm, the first step's page faults done).
constexpr int64_t kProfileWarmupSteps = 3;

struct TrainSummary {
  int64_t steps = 0;
  double final_loss = 0.0;
  double seconds = 0.0;
  std::string sample;  // generated text, when asked for
};

// Runs the job on this rank (rank and world from the environment, see dist/world.h).
// Throws UsageError on bad options/config, Error on runtime failures.
TrainSummary run_training(const TrainOptions& options);

}  // namespace zoff::train
