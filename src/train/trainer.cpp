// run_training: the loop shared by the engine and the plain-LibTorch reference.
#include "zoff/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <utility>

#include "zoff/checkpoint/checkpoint.h"
#include "zoff/checkpoint/load_module.h"
#include "zoff/checkpoint/safetensors_reader.h"
#include "zoff/config/config.h"
#include "zoff/config/lr_schedule.h"
#include "zoff/core/error.h"
#include "zoff/core/limits.h"
#include "zoff/core/output_path.h"
#include "zoff/core/process_memory.h"
#include "zoff/data/distributed_sampler.h"
#include "zoff/dist/heartbeat.h"
#include "zoff/dist/launcher.h"
#include "zoff/dist/world.h"
#include "zoff/engine/zero_engine.h"
#include "zoff/models/generate.h"
#include "zoff/report/progress.h"
#include "zoff/train/model_safetensors.h"
#include "zoff/train/op_profile.h"
#include "zoff/train/step_log.h"
#include "zoff/train/task.h"
#include "zoff/unit/unit_call.h"

namespace zoff::train {
namespace {

using Clock = std::chrono::steady_clock;
using engine::ms_since;

// --heartbeat-timeout beyond a day is a typo, not a wish (the collectives give up sooner).
constexpr int64_t kMaxHeartbeatTimeoutS = 86400;

// What the loop needs from whoever owns the model states: the engine or plain LibTorch.
class Stepper {
 public:
  virtual ~Stepper() = default;
  virtual void backward(const torch::Tensor& loss) = 0;
  virtual engine::StepStats step() = 0;
  virtual engine::MemoryStats memory() const = 0;
  // Lands any update still in flight (delayed parameter update). Collective.
  virtual void synchronize() {}
  // The engine, or nullptr for the plain-LibTorch reference.
  virtual engine::ZeroEngine* engine() { return nullptr; }
};

class EngineStepper : public Stepper {
 public:
  EngineStepper(std::shared_ptr<torch::nn::Module> module, const config::Config& cfg,
                dist::CommPtr comm, engine::EngineOptions opts)
      : engine_(std::move(module), cfg, std::move(comm), opts) {}
  void backward(const torch::Tensor& loss) override { engine_.backward(loss); }
  void synchronize() override { engine_.synchronize(); }
  engine::ZeroEngine* engine() override { return &engine_; }
  engine::StepStats step() override { return engine_.step(); }
  engine::MemoryStats memory() const override { return engine_.memory(); }

 private:
  engine::ZeroEngine engine_;
};

// Plain LibTorch: model->parameters(), torch::optim, clip_grad_norm_. No zoff engine.
class ReferenceStepper : public Stepper {
 public:
  ReferenceStepper(std::shared_ptr<torch::nn::Module> module, const config::Config& cfg)
      : module_(std::move(module)), cfg_(cfg), params_(module_->parameters()) {
    const auto& o = cfg.optimizer;
    int64_t numel = 0;
    for (auto& p : params_) numel += p.numel();
    int states = 0;
    if (o.type == "adamw") {
      optimizer_ =
          std::make_unique<torch::optim::AdamW>(params_, torch::optim::AdamWOptions(o.lr)
                                                             .betas({o.beta1, o.beta2})
                                                             .eps(o.eps)
                                                             .weight_decay(o.weight_decay));
      states = 2;
    } else if (o.type == "adam") {
      optimizer_ = std::make_unique<torch::optim::Adam>(params_, torch::optim::AdamOptions(o.lr)
                                                                     .betas({o.beta1, o.beta2})
                                                                     .eps(o.eps)
                                                                     .weight_decay(o.weight_decay));
      states = 2;
    } else if (o.type == "sgd") {
      optimizer_ = std::make_unique<torch::optim::SGD>(params_, torch::optim::SGDOptions(o.lr)
                                                                    .momentum(o.momentum)
                                                                    .dampening(o.dampening)
                                                                    .nesterov(o.nesterov)
                                                                    .weight_decay(o.weight_decay));
      states = o.momentum != 0.0 ? 1 : 0;
    } else if (o.type == "adagrad") {
      optimizer_ = std::make_unique<torch::optim::Adagrad>(
          params_, torch::optim::AdagradOptions(o.lr)
                       .lr_decay(o.lr_decay)
                       .weight_decay(o.weight_decay)
                       .initial_accumulator_value(o.initial_accumulator_value)
                       .eps(o.eps));
      states = 1;
    } else {
      throw UsageError("optimizer.type = " + o.type + ": unknown");
    }
    mem_.compute.params = static_cast<size_t>(numel) * 4;
    mem_.compute.grads = static_cast<size_t>(numel) * 4;
    mem_.compute.optim = static_cast<size_t>(numel) * 4 * static_cast<size_t>(states);
  }
  void backward(const torch::Tensor& loss) override {
    const auto start = Clock::now();
    (loss / static_cast<double>(cfg_.gradient_accumulation_steps)).backward();
    backward_ms_ += ms_since(start);
  }
  engine::StepStats step() override {
    const auto start = Clock::now();
    engine::StepStats s;
    s.times.backward_ms = std::exchange(backward_ms_, 0.0);
    double sq = 0;
    for (auto& p : params_) {
      if (p.grad().defined()) sq += p.grad().to(torch::kFloat64).square().sum().item<double>();
    }
    s.grad_norm = std::sqrt(sq);
    if (cfg_.gradient_clipping > 0) {
      torch::nn::utils::clip_grad_norm_(params_, cfg_.gradient_clipping);
    }
    s.times.grad_norm_ms = ms_since(start);
    const auto update_start = Clock::now();
    s.lr = config::lr_at(cfg_.scheduler, cfg_.optimizer.lr, step_);
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(s.lr);
    optimizer_->step();
    optimizer_->zero_grad();
    s.times.optimizer_ms = ms_since(update_start);
    s.step = ++step_;
    s.times.step_ms = ms_since(start);
    return s;
  }
  engine::MemoryStats memory() const override { return mem_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  config::Config cfg_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  engine::MemoryStats mem_;
  int64_t step_ = 0;
  double backward_ms_ = 0.0;  // this step's backward calls so far
};

// --threads, else ZOFF_NUM_THREADS (as `zoff launch` sets it, parsed by the launcher's own
// reader), else this process's share of the cores it may run on.
int pick_threads(const TrainOptions& o, const dist::WorldInfo& world) {
  if (o.threads > 0) return o.threads;
  if (const int n = dist::set_torch_threads_from_env(); n > 0) return n;
  return std::max(1, dist::available_cores() / std::max(1, world.local_world_size));
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

// The start-of-run table of model-state bytes on this rank, per category and tier.
std::string memory_table(const engine::MemoryStats& m) {
  std::string out = "model states on this rank     compute tier    offload tier (host)\n";
  auto row = [&](const char* name, size_t c, size_t o) {
    char line[128];
    std::snprintf(line, sizeof line, "  %-26s %12s    %12s\n", name,
                  human_bytes(static_cast<double>(c)).c_str(),
                  o == 0 ? "-" : human_bytes(static_cast<double>(o)).c_str());
    out += line;
  };
  row("parameters", m.compute.params, m.offload.params);
  row("gradients", m.compute.grads, m.offload.grads);
  row("fp32 master", m.compute.master, m.offload.master);
  row("optimizer states", m.compute.optim, m.offload.optim);
  row("buffers (at start)", m.compute.buffers, m.offload.buffers);
  row("total", m.compute.total(), m.offload.total());
  if (m.nvme.total() > 0) {
    out += "on disk (nvme tier): master " + human_bytes(static_cast<double>(m.nvme.master)) +
           ", optimizer states " + human_bytes(static_cast<double>(m.nvme.optim));
    if (m.nvme.params > 0) out += ", parameters " + human_bytes(static_cast<double>(m.nvme.params));
    out += "\n";
  }
  return out;
}

// One line on the NVMe tier's I/O path and sub-groups, when the engine has one.
void print_nvme_tier(const engine::ZeroEngine& engine) {
  const auto* t = engine.tiered();
  if (t == nullptr) return;
  const char* grads = t->grads_in_tier()    ? "gradient shard on disk"
                      : t->grads_streamed() ? "gradients streamed into the step (no shard)"
                                            : "gradient shard in memory";
  std::printf("nvme tier: %s; sub-groups of %lld elements, %d buffer set(s); %s\n",
              engine.nvme_io().c_str(), static_cast<long long>(t->sub_group_elems()), t->slots(),
              grads);
}

// --save-model FILE.safetensors streams the model (model_safetensors.h); any other name
// gets LibTorch's archive of the whole module.
bool is_safetensors_path(const std::string& path) {
  const std::string ext = ".safetensors";
  return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

// Writes the module's parameters with torch::save (LibTorch's own archive format), to a
// temporary name first so a crash never leaves a half-written file.
void save_module(torch::nn::Module& module, const std::string& path) {
  check_output_path("--save-model", path);  // checked before training too; it may have changed
  const std::string tmp = path + ".tmp";
  torch::serialize::OutputArchive archive;
  for (const auto& item : module.named_parameters()) archive.write(item.key(), item.value());
  try {
    archive.save_to(tmp);
  } catch (const std::exception& e) {
    throw UsageError("--save-model " + path + ": cannot write: " + e.what());
  }
  ZOFF_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "--save-model ", path, ": rename failed");
}

// Every flag that can be checked on its own, before any work (a model, a store, a file).
void check_options(const TrainOptions& o) {
  ZOFF_CHECK_ARG(o.steps >= 1, "--steps ", o.steps, ": must be >= 1");
  ZOFF_CHECK_ARG(o.layers == 0 || (o.save_dir.empty() && o.resume_dir.empty() &&
                                   o.save_model_path.empty() && o.init_from.empty()),
                 "--layers ", o.layers,
                 ": a model off the presets is not recorded in checkpoints or model files "
                 "(use it without --save, --resume, --save-model and --init-from)");
  ZOFF_CHECK_ARG(o.threads >= 0 && o.threads <= kMaxThreads, "--threads ", o.threads,
                 ": must be in [1, ", kMaxThreads, "] (0 = auto)");
  ZOFF_CHECK_ARG(o.eval_every >= 0, "--eval-every ", o.eval_every,
                 ": must be >= 0 (0 = once per epoch)");
  ZOFF_CHECK_ARG(o.save_every >= 0, "--save-every ", o.save_every,
                 ": must be >= 0 (0 = at the end)");
  ZOFF_CHECK_ARG(o.sample_prompt.empty() || o.model == "gpt", "--sample \"", o.sample_prompt,
                 "\": only --model gpt generates text (this run trains ", o.model, ")");
  ZOFF_CHECK_ARG(o.sample_tokens >= 0 && o.sample_tokens <= models::kMaxGenerateTokens,
                 "--sample-tokens ", o.sample_tokens, ": must be in [0, ",
                 models::kMaxGenerateTokens, "]");
  ZOFF_CHECK_ARG(o.optimizer_backend == "fused" || o.optimizer_backend == "torch",
                 "--optimizer-backend ", o.optimizer_backend, ": must be fused or torch");
  ZOFF_CHECK_ARG(o.comm_timeout_s >= 1, "--comm-timeout ", o.comm_timeout_s, ": must be >= 1");
  ZOFF_CHECK_ARG(o.heartbeat_timeout_s >= 0 && o.heartbeat_timeout_s <= kMaxHeartbeatTimeoutS,
                 "--heartbeat-timeout ", o.heartbeat_timeout_s, ": must be in [1, ",
                 kMaxHeartbeatTimeoutS, "] seconds (0 = off)");
  if (!o.save_model_path.empty()) check_output_path("--save-model", o.save_model_path);
  if (!o.profile_path.empty()) {
    check_output_path("--profile", o.profile_path);
    ZOFF_CHECK_ARG(o.profile_steps >= 1 && o.steps >= kProfileWarmupSteps + o.profile_steps,
                   "--profile-steps ", o.profile_steps, ": must be >= 1 and leave ",
                   kProfileWarmupSteps, " warm-up steps before it (--steps ", o.steps, ")");
  }
  ZOFF_CHECK_ARG(o.init_from.empty() || o.resume_dir.empty(), "--init-from ", o.init_from,
                 " and --resume ", o.resume_dir,
                 ": give one (a resumed run has its weights from the checkpoint)");
}

// --init-from: the module's weights from a safetensors file or a checkpoint directory,
// tensor by tensor, before the engine shards them (every rank reads the same values). A
// deferred module (placeholders) gets them from the file as the engine values each unit.
void load_initial_weights(Task& task, const std::string& path, unit::ParamInit* param_init) {
  if (std::filesystem::is_directory(path)) {
    checkpoint::load_module_from_checkpoint(*task.module(), path);
  } else if (*param_init) {
    *param_init = checkpoint::safetensors_param_init(*task.module(), path);
  } else {
    checkpoint::load_module_from_safetensors(*task.module(), path);
  }
}

// The engine builds a gpt unit by unit from placeholders (never the whole fp32 model in
// memory); the plain-LibTorch reference and --init-from a checkpoint directory (read
// into a whole module) build it eagerly.
bool defer_model(const TrainOptions& o) {
  return o.model == "gpt" && !o.reference &&
         (o.init_from.empty() || !std::filesystem::is_directory(o.init_from));
}

// --resume: loads the checkpoint into the engine and returns the step it was saved at.
int64_t resume(engine::ZeroEngine& engine, const TrainOptions& o,
               const checkpoint::CheckpointInfo& run_info, bool leader) {
  // What loading costs on top of the built engine: the peak while loading over the RSS
  // before it (the loader streams, so the difference stays near its chunk buffers).
  const int64_t rss_before = current_rss_bytes();
  const bool peak_reset = reset_peak_rss();
  auto info = checkpoint::load_checkpoint(engine, o.resume_dir, run_info);
  const int64_t start_step = info.step;  // load_checkpoint restored the RNG state too
  ZOFF_CHECK_ARG(start_step < o.steps, "--resume ", info.dir, " is at step ", start_step,
                 ", --steps ", o.steps, " leaves nothing to train");
  if (leader) {
    std::printf("resumed from %s at step %lld", info.dir.c_str(),
                static_cast<long long>(start_step));
    if (peak_reset && rss_before > 0) {
      std::printf(" (RSS %.1f MB before loading, peak %.1f MB while loading)",
                  static_cast<double>(rss_before) / 1e6,
                  static_cast<double>(peak_rss_bytes()) / 1e6);
    }
    std::printf("\n");
  }
  return start_step;
}

}  // namespace

TrainSummary run_training(const TrainOptions& o) {
  check_options(o);
  const auto world = dist::WorldInfo::from_env();
  ZOFF_CHECK_ARG(
      !o.reference || world.world_size == 1,
      "--reference trains plain LibTorch at world size 1, but WORLD_SIZE = ", world.world_size);
  const int threads = pick_threads(o, world);
  torch::set_num_threads(threads);
  const bool leader = world.rank == 0;

  auto cfg = config::load_config(o.config_path, world.world_size);
  if (leader) {
    for (const auto& w : cfg.warnings) std::fprintf(stderr, "zoff: warning: %s\n", w.c_str());
  }
  cfg.warnings.clear();  // printed: the engine would print them again
  ZOFF_CHECK_ARG(!cfg.fp16.enabled,
                 "fp16.enabled = true: LibTorch 1.13's CPU kernels have no fp16 matmul, so "
                 "fp16 compute needs a GPU build; use \"bf16\": {\"enabled\": true} on CPU");
  ZOFF_CHECK_ARG(!o.reference || (!cfg.bf16 && cfg.zero.offload_optimizer.device == "none"),
                 "--reference trains plain fp32 LibTorch: drop bf16/offload from the config");
  auto comm = dist::init_comm(world, std::chrono::seconds(o.comm_timeout_s));
  std::unique_ptr<dist::Heartbeat> heartbeat;  // destroyed before comm: rank 0's store outlives it
  if (world.world_size > 1 && o.heartbeat_timeout_s > 0) {
    heartbeat = std::make_unique<dist::Heartbeat>(
        world, dist::HeartbeatOptions{std::chrono::seconds(o.heartbeat_timeout_s), {}});
  }
  auto task = make_task(
      {o.model, o.preset, o.seed, o.activation_checkpointing || cfg.activation_checkpointing,
       cfg.train_micro_batch_size_per_gpu, o.data_path, o.context, defer_model(o), o.layers});
  unit::ParamInit param_init = task->param_init();
  if (!o.init_from.empty()) load_initial_weights(*task, o.init_from, &param_init);
  data::DistributedSampler sampler(task->train_set().size(), cfg.train_batch_size, o.seed);

  std::unique_ptr<Stepper> stepper;
  if (o.reference) {
    stepper = std::make_unique<ReferenceStepper>(task->module(), cfg);
  } else {
    engine::EngineOptions eo;
    eo.optimizer_backend = o.optimizer_backend == "torch" ? optim::OptimizerBackend::kTorch
                                                          : optim::OptimizerBackend::kFused;
    eo.optimizer_threads = threads;
    eo.param_init = param_init;
    stepper = std::make_unique<EngineStepper>(task->module(), cfg, comm, eo);
  }
  const bool forward_is_collective =
      stepper->engine() != nullptr && stepper->engine()->gatherer() != nullptr;
  StepLog log(leader ? o.log_path : "", /*append=*/!o.resume_dir.empty());
  if (leader) {
    std::printf(
        "zoff train: %s%s, %d rank(s), stage %d, %s, global batch %lld (micro %lld x "
        "accum %lld x ranks %d), %d thread(s)/rank\n",
        task->name().c_str(), o.preset.empty() ? "" : (" " + o.preset).c_str(), world.world_size,
        cfg.zero.stage, o.reference ? "plain LibTorch reference" : "zoff engine",
        static_cast<long long>(cfg.train_batch_size),
        static_cast<long long>(cfg.train_micro_batch_size_per_gpu),
        static_cast<long long>(cfg.gradient_accumulation_steps), world.world_size, threads);
    std::printf("%s", memory_table(stepper->memory()).c_str());
    if (stepper->engine() != nullptr) print_nvme_tier(*stepper->engine());
    std::fflush(stdout);
  }

  const int64_t accum = cfg.gradient_accumulation_steps;
  const int64_t micro = cfg.train_micro_batch_size_per_gpu;
  // The reference sees world size 1, so it walks every rank's micro-batches itself.
  const int rank = o.reference ? 0 : world.rank;
  const int ranks = o.reference ? 1 : world.world_size;
  // Checkpoints: the run's identity, checked again on resume.
  checkpoint::CheckpointInfo run_info;
  run_info.model = o.model;
  run_info.preset = o.preset;
  run_info.context = o.context;
  run_info.seed = o.seed;
  ZOFF_CHECK_ARG(o.save_every >= 0, "--save-every ", o.save_every, ": must be >= 0");
  ZOFF_CHECK_ARG(!o.reference || (o.save_dir.empty() && o.resume_dir.empty()),
                 "--reference does not write or read checkpoints");
  ZOFF_CHECK_ARG(o.save_every == 0 || !o.save_dir.empty(), "--save-every needs --save DIR");
  int64_t start_step = 0;
  if (!o.resume_dir.empty()) start_step = resume(*stepper->engine(), o, run_info, leader);

  std::unique_ptr<report::ProgressDisplay> progress;
  if (leader) {
    report::ProgressOptions po;
    po.print_every = std::max<int64_t>(1, cfg.steps_per_print);
    progress = std::make_unique<report::ProgressDisplay>(std::cerr, isatty(STDERR_FILENO) != 0, po);
  }
  const auto t0 = Clock::now();
  TrainSummary summary;
  StepSpanProfile profiler(o.profile_path, start_step + kProfileWarmupSteps, o.profile_steps,
                           leader);
  for (int64_t step = start_step; step < o.steps; ++step) {
    profiler.before_step(step);
    const auto ts = Clock::now();
    double loss_sum = 0;
    double forward_ms = 0;  // the task's forward and loss, over the micro-batches
    for (int64_t k = 0; k < accum; ++k) {
      auto batch = task->train_set().get(sampler.micro_batch(step, rank, ranks, k, micro));
      const auto forward_start = Clock::now();
      auto loss = task->loss(batch);
      forward_ms += ms_since(forward_start);
      stepper->backward(loss);
      loss_sum += loss.item<double>();
    }
    const auto stats = stepper->step();
    auto mean = torch::tensor({loss_sum / static_cast<double>(accum)}, torch::kFloat64);
    if (ranks > 1) comm->all_reduce_sum(mean)->wait();
    const double dt = std::chrono::duration<double>(Clock::now() - ts).count();
    profiler.after_step(step);
    StepRecord rec;
    rec.step = stats.step;
    rec.loss = mean.item<double>() / ranks;
    rec.lr = stats.lr;
    rec.grad_norm = stats.grad_norm;
    rec.skipped = stats.skipped;
    rec.loss_scale = stats.loss_scale;
    if (cfg.wall_clock_breakdown) {
      rec.timed = true;
      rec.forward_ms = forward_ms;
      rec.times = stats.times;
    }
    rec.samples_per_s = static_cast<double>(cfg.train_batch_size) / dt;
    rec.tokens_per_s = rec.samples_per_s * static_cast<double>(task->tokens_per_sample());
    rec.mem = stepper->memory();
    rec.peak_rss = peak_rss_bytes();
    ZOFF_CHECK(std::isfinite(rec.loss) || rec.skipped, "step ", rec.step, ": loss is ", rec.loss);
    log.write_step(rec);
    summary.final_loss = rec.loss;
    summary.steps = rec.step;
    const bool last = step + 1 == o.steps;
    if (progress) {
      report::ProgressStep ps;
      ps.step = rec.step;
      ps.total_steps = o.steps;
      ps.loss = rec.loss;
      ps.lr = rec.lr;
      ps.samples_per_s = rec.samples_per_s;
      if (rec.tokens_per_s > 0) ps.tokens_per_s = rec.tokens_per_s;
      ps.mem_bytes = static_cast<int64_t>(rec.mem.compute.total() + rec.mem.offload.total());
      progress->update(ps);
      if (rec.timed && (rec.step % cfg.steps_per_print == 0 || last)) {
        progress->finish();  // a redrawn progress line ends before the times line
        std::fprintf(stderr, "%s\n", step_times_line(rec).c_str());
      }
    }
    const bool epoch_end = rec.step % sampler.steps_per_epoch() == 0;
    const bool eval_now = o.eval_every > 0 ? rec.step % o.eval_every == 0 : epoch_end;
    const bool save_now =
        !o.save_dir.empty() && (last || (o.save_every > 0 && rec.step % o.save_every == 0));
    if (eval_now || last || save_now) stepper->synchronize();
    if (save_now) {
      const auto dir = checkpoint::save_checkpoint(*stepper->engine(), o.save_dir, run_info);
      if (progress) progress->finish();
      if (leader) std::printf("saved checkpoint %s\n", dir.c_str());
    }
    // Stage 3 gathers units in every forward, a collective: every rank evaluates then.
    if ((leader || forward_is_collective) && (eval_now || last) && !o.no_eval) {
      const auto metrics = task->evaluate();
      if (leader && !metrics.empty()) {
        if (progress) progress->finish();
        log.write_eval(rec.step, metrics);
        std::printf("eval at step %lld:", static_cast<long long>(rec.step));
        for (const auto& [k, v] : metrics) std::printf("  %s %.4f", k.c_str(), v);
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  }
  if (progress) progress->finish();
  summary.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (is_safetensors_path(o.save_model_path)) {
    check_output_path("--save-model", o.save_model_path);  // it may have appeared meanwhile
    const std::map<std::string, std::string> meta{{"format", "pt"},
                                                  {"producer", "zoff"},
                                                  {"model", o.model},
                                                  {"preset", o.preset},
                                                  {"context", std::to_string(o.context)},
                                                  {"step", std::to_string(summary.steps)}};
    const uint64_t bytes =
        save_model_safetensors(stepper->engine(), *task->module(), o.save_model_path, meta, leader);
    if (leader)
      std::printf("saved model %s (%llu bytes)\n", o.save_model_path.c_str(),
                  static_cast<unsigned long long>(bytes));
  } else if (!o.save_model_path.empty()) {
    // with_unit on the root makes every unit whole at stage 3 (and is a no-op otherwise).
    zoff::with_unit(*task->module(), [&] {
      if (leader) save_module(*task->module(), o.save_model_path);
      return torch::Tensor();
    });
  }
  if ((leader || forward_is_collective) && !o.sample_prompt.empty()) {
    summary.sample = task->sample(o.sample_prompt, o.sample_tokens, o.seed);
  }
  return summary;
}

}  // namespace zoff::train
