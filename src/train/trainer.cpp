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

#include "stepper.h"
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
#include "zoff/models/widened_products.h"
#include "zoff/placement/placement.h"
#include "zoff/report/progress.h"
#include "zoff/train/model_safetensors.h"
#include "zoff/train/op_profile.h"
#include "zoff/train/step_log.h"
#include "zoff/train/step_ticker.h"
#include "zoff/train/task.h"
#include "zoff/unit/unit_call.h"

namespace zoff::train {
namespace {

using Clock = std::chrono::steady_clock;
using engine::ms_since;

// --heartbeat-timeout beyond a day is a typo, not a wish (the collectives give up sooner).
constexpr int64_t kMaxHeartbeatTimeoutS = 86400;

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

// The split master's odd ties over the run's steps on this rank: how far it is from the
// 4-byte master's training (each one moved one element by one fp32 ulp).
void print_split_master(const engine::ZeroEngine* engine, int64_t steps, bool leader) {
  if (engine == nullptr || !engine->placement().split_master || !leader || steps <= 0) return;
  const uint64_t settled = engine->split_master_settled();
  const size_t numel = engine->store_numel();
  const double updates = static_cast<double>(numel) * static_cast<double>(steps);
  std::printf("split master: %llu odd ties settled in %lld steps of %zu elements (1 in %.3g)\n",
              static_cast<unsigned long long>(settled), static_cast<long long>(steps), numel,
              settled > 0 ? updates / static_cast<double>(settled) : 0.0);
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
    check_output_path("--profile", rank_profile_path(o.profile_path, 0));  // same directory
    ZOFF_CHECK_ARG(o.profile_steps >= 1 && o.steps >= kProfileWarmupSteps + o.profile_steps,
                   "--profile-steps ", o.profile_steps, ": must be >= 1 and leave ",
                   kProfileWarmupSteps, " warm-up steps before it (--steps ", o.steps, ")");
  }
  ZOFF_CHECK_ARG(!o.reference || (o.save_dir.empty() && o.resume_dir.empty()),
                 "--reference does not write or read checkpoints");
  ZOFF_CHECK_ARG(o.save_every == 0 || !o.save_dir.empty(), "--save-every needs --save DIR");
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

// Checks the world against --reference, then sets LibTorch's threads for this rank (before
// the communicator and the model exist) and returns their number.
int set_up_threads(const TrainOptions& o, const dist::WorldInfo& world) {
  ZOFF_CHECK_ARG(
      !o.reference || world.world_size == 1,
      "--reference trains plain LibTorch at world size 1, but WORLD_SIZE = ", world.world_size);
  const int threads = pick_threads(o, world);
  torch::set_num_threads(threads);
  return threads;
}

// The checkpoint identity of this run, checked again on resume.
checkpoint::CheckpointInfo run_identity(const TrainOptions& o) {
  checkpoint::CheckpointInfo info;
  info.model = o.model;
  info.preset = o.preset;
  info.context = o.context;
  info.seed = o.seed;
  return info;
}

// The run's config for `world_size` ranks, its warnings printed once (by the leader), and
// what the run cannot do refused.
config::Config load_run_config(const TrainOptions& o, int world_size, bool leader) {
  auto cfg = config::load_config(o.config_path, world_size);
  if (leader) {
    for (const auto& w : cfg.warnings) std::fprintf(stderr, "zoff: warning: %s\n", w.c_str());
  }
  cfg.warnings.clear();  // printed: the engine would print them again
  if (o.reference) {
    placement::PlacementContext ctx;
    ctx.world = world_size;
    const placement::Placement p = placement::resolve(cfg, ctx);
    ZOFF_CHECK_ARG(
        p.precision == placement::Precision::kFp32 && !p.offloaded(),
        "--reference trains plain fp32 LibTorch: drop bf16/fp16/offload from the config");
  }
  if (cfg.bf16) models::bf16_products_widened();  // a bad ZOFF_BF16_PRODUCTS stops the run here
  return cfg;
}

// One `zoff train` run. The members are built in declaration order, each from the ones
// before it; the heartbeat is destroyed before the communicator (rank 0's store outlives it).
class TrainRun {
 public:
  explicit TrainRun(const TrainOptions& o);
  TrainSummary run();

 private:
  std::unique_ptr<Task> build_task();
  std::unique_ptr<Stepper> build_stepper();
  void print_banner() const;
  StepRecord train_step(int64_t step);
  void report(const StepRecord& rec, bool last);
  void save_and_evaluate(const StepRecord& rec, bool last);
  void save_model(int64_t steps);

  const TrainOptions& o_;
  dist::WorldInfo world_;
  bool leader_;
  int threads_;
  config::Config cfg_;
  dist::CommPtr comm_;
  std::unique_ptr<dist::Heartbeat> heartbeat_;
  unit::ParamInit param_init_;  // set by build_task
  std::unique_ptr<Task> task_;
  data::DistributedSampler sampler_;
  std::unique_ptr<Stepper> stepper_;
  // Stage 3 gathers units in every forward, a collective: every rank evaluates then.
  bool forward_is_collective_;
  StepLog log_;
  // The reference sees world size 1, so it walks every rank's micro-batches itself.
  int rank_;
  int ranks_;
  checkpoint::CheckpointInfo run_info_;
  std::unique_ptr<report::ProgressDisplay> progress_;  // the leader's
  std::unique_ptr<StepTicker> ticker_;                 // the leader's, with the zoff engine
  int64_t ticking_step_ = 0;                           // the step the ticker reports
};

TrainRun::TrainRun(const TrainOptions& o)
    : o_(o),
      world_(dist::WorldInfo::from_env()),
      leader_(world_.rank == 0),
      threads_(set_up_threads(o, world_)),
      cfg_(load_run_config(o, world_.world_size, leader_)),
      comm_(dist::init_comm(world_, std::chrono::seconds(o.comm_timeout_s))),
      heartbeat_(
          world_.world_size > 1 && o.heartbeat_timeout_s > 0
              ? std::make_unique<dist::Heartbeat>(
                    world_, dist::HeartbeatOptions{std::chrono::seconds(o.heartbeat_timeout_s), {}})
              : nullptr),
      task_(build_task()),
      sampler_(task_->train_set().size(), cfg_.train_batch_size, o.seed),
      stepper_(build_stepper()),
      forward_is_collective_(stepper_->engine() != nullptr &&
                             stepper_->engine()->gatherer() != nullptr),
      log_(leader_ ? o.log_path : "", /*append=*/!o.resume_dir.empty()),
      rank_(o.reference ? 0 : world_.rank),
      ranks_(o.reference ? 1 : world_.world_size),
      run_info_(run_identity(o)) {
  if (leader_) {
    report::ProgressOptions po;
    po.print_every = std::max<int64_t>(1, cfg_.steps_per_print);
    progress_ =
        std::make_unique<report::ProgressDisplay>(std::cerr, isatty(STDERR_FILENO) != 0, po);
  }
  const engine::ZeroEngine* engine = stepper_->engine();
  if (leader_ && engine != nullptr && o.step_progress_s > 0) {
    StepTotals totals;
    totals.total_steps = o.steps;
    totals.units = engine->gatherer() ? static_cast<int64_t>(engine->gatherer()->unit_count()) : 0;
    totals.groups = engine->tiered() ? static_cast<int64_t>(engine->tiered()->groups()) : 0;
    ticker_ = std::make_unique<StepTicker>(
        std::chrono::milliseconds(static_cast<int64_t>(o.step_progress_s * 1000)),
        [this, engine, totals](double seconds) {
          StepTotals t = totals;
          t.step = ticking_step_;
          return step_progress_line(t, seconds, engine->progress());
        },
        std::cerr);
  }
}

std::unique_ptr<Task> TrainRun::build_task() {
  auto task = make_task({o_.model, o_.preset, o_.seed,
                         o_.activation_checkpointing || cfg_.activation_checkpointing,
                         cfg_.train_micro_batch_size_per_gpu, o_.data_path, o_.context,
                         defer_model(o_), o_.layers, o_.attention});
  param_init_ = task->param_init();
  if (!o_.init_from.empty()) load_initial_weights(*task, o_.init_from, &param_init_);
  return task;
}

std::unique_ptr<Stepper> TrainRun::build_stepper() {
  if (o_.reference) return make_reference_stepper(task_->module(), cfg_);
  engine::EngineOptions eo;
  eo.optimizer_backend = o_.optimizer_backend == "torch" ? optim::OptimizerBackend::kTorch
                                                         : optim::OptimizerBackend::kFused;
  eo.optimizer_threads = threads_;
  eo.param_init = param_init_;
  return make_engine_stepper(task_->module(), cfg_, comm_, eo);
}

// "communication: 4 ranks on 2 hosts, shared memory within a host and gloo between hosts".
std::string transport_line(const dist::Comm& comm, const dist::WorldInfo& world) {
  const int hosts = world.hosts();
  const std::string backend = comm.backend();
  const std::string how = backend == "shm" ? "shared memory"
                          : backend == "shm+gloo"
                              ? "shared memory within a host and gloo between hosts"
                          : backend == "gloo" && hosts > 1 ? "gloo between hosts"
                                                           : backend;
  return zoff::detail::concat("communication: ", world.world_size, " ranks on ", hosts,
                              hosts == 1 ? " host, " : " hosts, ", how);
}

void TrainRun::print_banner() const {
  if (!leader_) return;
  std::printf(
      "zoff train: %s%s, %d rank(s), stage %d, %s, global batch %lld (micro %lld x "
      "accum %lld x ranks %d), %d thread(s)/rank\n",
      task_->name().c_str(), o_.preset.empty() ? "" : (" " + o_.preset).c_str(), world_.world_size,
      cfg_.zero.stage, o_.reference ? "plain LibTorch reference" : "zoff engine",
      static_cast<long long>(cfg_.train_batch_size),
      static_cast<long long>(cfg_.train_micro_batch_size_per_gpu),
      static_cast<long long>(cfg_.gradient_accumulation_steps), world_.world_size, threads_);
  if (cfg_.bf16) {
    std::printf("bf16 matrix products: %s\n", models::bf16_products_widened()
                                                  ? "widened (fp32 GEMM, rounded once)"
                                                  : "native (LibTorch's bf16 GEMM)");
  }
  if (world_.world_size > 1) std::printf("%s\n", transport_line(*comm_, world_).c_str());
  if (stepper_->engine() != nullptr) {
    std::printf("placement: %s\n", stepper_->engine()->placement().describe().c_str());
  }
  std::printf("%s", memory_table(stepper_->memory()).c_str());
  if (stepper_->engine() != nullptr) print_nvme_tier(*stepper_->engine());
  std::fflush(stdout);
}

// One optimizer step: forward and backward over this rank's micro-batches, the step, and
// its record (the loss averaged over the micro-batches and the ranks).
StepRecord TrainRun::train_step(int64_t step) {
  const auto ts = Clock::now();
  const int64_t accum = cfg_.gradient_accumulation_steps;
  double loss_sum = 0;
  double forward_ms = 0;  // the task's forward and loss, over the micro-batches
  for (int64_t k = 0; k < accum; ++k) {
    auto batch = task_->train_set().get(
        sampler_.micro_batch(step, rank_, ranks_, k, cfg_.train_micro_batch_size_per_gpu));
    const auto forward_start = Clock::now();
    auto loss = task_->loss(batch);
    forward_ms += ms_since(forward_start);
    stepper_->backward(loss);
    loss_sum += loss.item<double>();
  }
  const auto stats = stepper_->step();
  auto mean = torch::tensor({loss_sum / static_cast<double>(accum)}, torch::kFloat64);
  if (ranks_ > 1) comm_->all_reduce_sum(mean)->wait();
  const double dt = std::chrono::duration<double>(Clock::now() - ts).count();
  StepRecord rec;
  rec.step = stats.step;
  rec.loss = mean.item<double>() / ranks_;
  if (world_.world_size > 1) {
    rec.transport = comm_->backend();
    rec.hosts = world_.hosts();
  }
  rec.lr = stats.lr;
  rec.grad_norm = stats.grad_norm;
  rec.skipped = stats.skipped;
  rec.loss_scale = stats.loss_scale;
  if (cfg_.wall_clock_breakdown) {
    rec.timed = true;
    rec.forward_ms = forward_ms;
    rec.times = stats.times;
  }
  rec.samples_per_s = static_cast<double>(cfg_.train_batch_size) / dt;
  rec.tokens_per_s = rec.samples_per_s * static_cast<double>(task_->tokens_per_sample());
  rec.mem = stepper_->memory();
  rec.peak_rss = peak_rss_bytes();
  ZOFF_CHECK(std::isfinite(rec.loss) || rec.skipped, "step ", rec.step, ": loss is ", rec.loss);
  return rec;
}

// The leader's progress line, and the phase times every steps_per_print steps.
void TrainRun::report(const StepRecord& rec, bool last) {
  if (!progress_) return;
  report::ProgressStep ps;
  ps.step = rec.step;
  ps.total_steps = o_.steps;
  ps.loss = rec.loss;
  ps.lr = rec.lr;
  ps.samples_per_s = rec.samples_per_s;
  if (rec.tokens_per_s > 0) ps.tokens_per_s = rec.tokens_per_s;
  ps.mem_bytes = static_cast<int64_t>(rec.mem.compute.total() + rec.mem.offload.total());
  progress_->update(ps);
  if (rec.timed && (rec.step % cfg_.steps_per_print == 0 || last)) {
    progress_->finish();  // a redrawn progress line ends before the times line
    std::fprintf(stderr, "%s\n", step_times_line(rec).c_str());
  }
}

// The checkpoint and the evaluation due after this step, if any.
void TrainRun::save_and_evaluate(const StepRecord& rec, bool last) {
  const bool epoch_end = rec.step % sampler_.steps_per_epoch() == 0;
  const bool eval_now = o_.eval_every > 0 ? rec.step % o_.eval_every == 0 : epoch_end;
  const bool save_now =
      !o_.save_dir.empty() && (last || (o_.save_every > 0 && rec.step % o_.save_every == 0));
  if (eval_now || last || save_now) stepper_->synchronize();
  if (save_now) {
    const auto dir = checkpoint::save_checkpoint(*stepper_->engine(), o_.save_dir, run_info_);
    if (progress_) progress_->finish();
    if (leader_) std::printf("saved checkpoint %s\n", dir.c_str());
  }
  if (!(leader_ || forward_is_collective_) || !(eval_now || last) || o_.no_eval) return;
  const auto metrics = task_->evaluate();
  if (!leader_ || metrics.empty()) return;
  if (progress_) progress_->finish();
  log_.write_eval(rec.step, metrics);
  std::printf("eval at step %lld:", static_cast<long long>(rec.step));
  for (const auto& [k, v] : metrics) std::printf("  %s %.4f", k.c_str(), v);
  std::printf("\n");
  std::fflush(stdout);
}

// --save-model: safetensors streamed unit by unit, or LibTorch's archive of the module.
void TrainRun::save_model(int64_t steps) {
  if (is_safetensors_path(o_.save_model_path)) {
    check_output_path("--save-model", o_.save_model_path);  // it may have appeared meanwhile
    const std::map<std::string, std::string> meta{{"format", "pt"},
                                                  {"producer", "zoff"},
                                                  {"model", o_.model},
                                                  {"preset", o_.preset},
                                                  {"context", std::to_string(o_.context)},
                                                  {"step", std::to_string(steps)}};
    const uint64_t bytes = save_model_safetensors(stepper_->engine(), *task_->module(),
                                                  o_.save_model_path, meta, leader_);
    if (leader_)
      std::printf("saved model %s (%llu bytes)\n", o_.save_model_path.c_str(),
                  static_cast<unsigned long long>(bytes));
  } else if (!o_.save_model_path.empty()) {
    // with_unit on the root makes every unit whole at stage 3 (and is a no-op otherwise).
    zoff::with_unit(*task_->module(), [&] {
      if (leader_) save_module(*task_->module(), o_.save_model_path);
      return torch::Tensor();
    });
  }
}

TrainSummary TrainRun::run() {
  print_banner();
  int64_t start_step = 0;
  if (!o_.resume_dir.empty()) start_step = resume(*stepper_->engine(), o_, run_info_, leader_);
  const auto t0 = Clock::now();
  TrainSummary summary;
  StepSpanProfile profiler(o_.profile_path, start_step + kProfileWarmupSteps, o_.profile_steps,
                           world_.rank);
  for (int64_t step = start_step; step < o_.steps; ++step) {
    profiler.before_step(step);
    ticking_step_ = step + 1;
    if (ticker_) ticker_->begin_step();
    const StepRecord rec = train_step(step);
    if (ticker_) ticker_->end_step();
    profiler.after_step(step);
    log_.write_step(rec);
    summary.final_loss = rec.loss;
    summary.steps = rec.step;
    const bool last = step + 1 == o_.steps;
    report(rec, last);
    save_and_evaluate(rec, last);
  }
  if (progress_) progress_->finish();
  print_split_master(stepper_->engine(), summary.steps - start_step, leader_);
  summary.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  save_model(summary.steps);
  if ((leader_ || forward_is_collective_) && !o_.sample_prompt.empty()) {
    summary.sample = task_->sample(o_.sample_prompt, o_.sample_tokens, o_.seed);
  }
  heartbeat_.reset();  // this rank's part is done: from here on its silence is no fault
  return summary;
}

}  // namespace

TrainSummary run_training(const TrainOptions& o) {
  check_options(o);  // before any work: a model, a store, a file
  return TrainRun(o).run();
}

}  // namespace zoff::train
