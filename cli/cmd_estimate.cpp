// `zoff estimate`: model-state memory per rank and per node for ZeRO stages 0-3; with --plan
// the peak RSS and disk bytes of a whole training run; with --ram/--disk the candidate
// configurations of a run, which fit, and the cheapest written as a config.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "zoff/checkpoint/atomic_file.h"
#include "zoff/config/config.h"
#include "zoff/config/config_json.h"
#include "zoff/core/error.h"
#include "zoff/core/output_path.h"
#include "zoff/data/fortunes_text.h"
#include "zoff/estimate/memory_estimate.h"
#include "zoff/estimate/param_count.h"
#include "zoff/estimate/plan_choice.h"
#include "zoff/estimate/run_plan.h"
#include "zoff/models/causal_attention.h"
#include "zoff/models/gpt_config.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::cli {
namespace {

// The models area knows each preset's exact size without building the model.
int64_t preset_param_count(const std::string& model, const std::string& preset) {
  if (model == "gpt") return models::gpt_param_count(models::gpt_preset(preset));
  throw UsageError("--model = \"" + model + "\": must be gpt (the model with named presets)");
}

struct EstimateArgs {
  std::string params;
  std::string model;
  std::string preset;
  int64_t ranks = 1;
  int64_t nodes = 1;
  std::string offload = "none";
  std::string precision = "bf16";
  std::string state_dtype = "fp32";
  int64_t live_params = -1;  // -1: two gpt blocks for --model gpt, else 0
  bool host_shared_params = false;
  bool no_split_master = false;
  bool json = false;
  // --plan: the whole run of `zoff train --config CONFIG` (peak RSS and disk of one rank)
  bool plan = false;
  std::string config;
  int64_t context = 0;
  int64_t layers = 0;
  std::string attention = "auto";  // --plan: gpt's attention kernel (models::AttentionKernel)
  bool activation_checkpointing = false;
  // --ram/--disk: choose among candidate configurations; --plan FILE writes the chosen one.
  std::string ram;
  std::string disk;
  std::string plan_file;
  int64_t micro_batch = -1;  // -1: 1, or the --config's
  std::string nvme_path;     // "": the --config's nvme_path, else /var/tmp/zoff_nvme
};

// Bytes of the text files under Debian's fortunes directory: the gpt's training data, held
// in memory as bytes.
int64_t fortunes_bytes() {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data::kFortunesDefaultDir, ec)) {
    const auto ext = e.path().extension().string();
    if (e.is_regular_file() && ext != ".dat" && ext != ".u8") {
      bytes += static_cast<int64_t>(e.file_size());
    }
  }
  return bytes;
}

// What the planner counts of `--model gpt --preset P` (with --context, --layers) trained with
// `cfg`'s micro-batch and precision.
estimate::PlanModel gpt_plan_model(const EstimateArgs& a, const config::Config& cfg,
                                   bool checkpointing) {
  auto shape = models::gpt_preset(a.preset, a.context);
  if (a.layers > 0) shape.n_layer = a.layers;
  shape.attention = models::parse_attention_kernel(a.attention);
  // The kernel the run will take on this machine (kAuto resolves against its CPU).
  const bool flash = models::flash_attention_applies(shape.attention, shape.block_size,
                                                     cfg.bf16 ? torch::kBFloat16 : torch::kFloat32,
                                                     /*cpu=*/true, shape.dropout > 0.0);
  estimate::PlanModel m;
  m.unit_elems = models::gpt_unit_elems(shape);
  m.activation_bytes = models::gpt_activation_bytes(shape, cfg.train_micro_batch_size_per_gpu,
                                                    cfg.bf16 ? 2 : 4, checkpointing, flash);
  m.late_activation_bytes = models::gpt_late_activation_bytes(
      shape, cfg.train_micro_batch_size_per_gpu, cfg.bf16 ? 2 : 4, checkpointing);
  m.data_bytes = fortunes_bytes();
  return m;
}

// The run a chooser starts from without --config: bf16 AdamW with a warmup, one
// micro-batch per step; the chooser sets stage, offload, state dtype and checkpointing.
std::string default_run_json(int64_t micro_batch) {
  return R"({"train_micro_batch_size_per_gpu": )" + std::to_string(micro_batch) +
         R"(, "gradient_accumulation_steps": 1, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 100}},
  "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}})";
}

// zoff estimate --ram R --disk D: the candidates, which fit, and with --plan FILE the
// cheapest that fits written as a config `zoff train --config FILE` runs.
void run_choose(const EstimateArgs& a) {
  ZOFF_CHECK_ARG(a.model == "gpt" && !a.preset.empty(),
                 "--ram/--disk need --model gpt --preset P (the model whose runs they plan)");
  ZOFF_CHECK_ARG(!a.disk.empty(), "--ram needs --disk (what the tier files may take; 0 for none)");
  ZOFF_CHECK_ARG(!a.ram.empty(), "--disk needs --ram (the memory the run's ranks may take)");
  ZOFF_CHECK_ARG(a.ranks >= 1 && a.ranks <= 4096, "--ranks ", a.ranks, ": must be in [1, 4096]");
  ZOFF_CHECK_ARG(a.layers >= 0, "--layers ", a.layers, ": must be >= 1 (0 = the preset's)");
  ZOFF_CHECK_ARG(a.micro_batch == -1 || a.micro_batch >= 1, "--micro-batch ", a.micro_batch,
                 ": must be >= 1");
  ZOFF_CHECK_ARG(a.config.empty() || a.micro_batch == -1,
                 "--micro-batch with --config: the config's batch is used; give one of them");
  ZOFF_CHECK_ARG(!a.plan || !a.plan_file.empty(),
                 "--plan with --ram/--disk needs a FILE to write the chosen config to");
  ZOFF_CHECK_ARG(!a.json && !a.activation_checkpointing,
                 "--json and --activation-checkpointing are not for --ram/--disk (the candidates "
                 "are printed as a table, with and without checkpointing)");
  if (!a.plan_file.empty()) check_output_path("--plan", a.plan_file);
  const int world = static_cast<int>(a.ranks);
  const auto base =
      a.config.empty()
          ? config::parse_config(default_run_json(std::max<int64_t>(1, a.micro_batch)), world)
          : config::load_config(a.config, world);
  const auto& base_paths = base.zero.offload_optimizer.nvme_paths;
  const std::string nvme_path = !a.nvme_path.empty()  ? a.nvme_path
                                : !base_paths.empty() ? base_paths.front()
                                                      : std::string("/var/tmp/zoff_nvme");
  estimate::MachineBudget budget;
  budget.ram_bytes = estimate::parse_byte_size("--ram", a.ram);
  budget.disk_bytes = estimate::parse_byte_size("--disk", a.disk);
  const auto candidates = estimate::plan_candidates(
      base, world, nvme_path,
      [&](bool checkpointing) { return gpt_plan_model(a, base, checkpointing); }, budget);
  std::cout << estimate::candidates_table(candidates, budget);
  if (a.plan_file.empty()) return;
  const estimate::Candidate* chosen = estimate::cheapest_fitting(candidates);
  ZOFF_CHECK_ARG(chosen != nullptr, "--plan ", a.plan_file, ": no candidate fits --ram ", a.ram,
                 " and --disk ", a.disk, "; nothing written");
  checkpoint::write_file_atomically(a.plan_file,
                                    config::normalized_config_json(chosen->config) + "\n");
  std::cout << "wrote " << a.plan_file << ": " << chosen->name << "\n";
}

// zoff estimate --plan: one rank of `zoff train --model gpt --preset P --config C` planned.
void run_plan(const EstimateArgs& a) {
  ZOFF_CHECK_ARG(a.model == "gpt" && !a.preset.empty(),
                 "--plan needs --model gpt --preset P (the model whose units and activations "
                 "it counts)");
  ZOFF_CHECK_ARG(!a.config.empty(), "--plan needs --config FILE (the run's JSON config)");
  ZOFF_CHECK_ARG(a.ranks >= 1 && a.ranks <= 4096, "--ranks ", a.ranks, ": must be in [1, 4096]");
  ZOFF_CHECK_ARG(a.layers >= 0, "--layers ", a.layers, ": must be >= 1 (0 = the preset's)");
  const int world = static_cast<int>(a.ranks);
  const auto cfg = config::load_config(a.config, world);
  const bool checkpointing = a.activation_checkpointing || cfg.activation_checkpointing;
  const auto plan = estimate::plan_run(cfg, world, gpt_plan_model(a, cfg, checkpointing));
  std::cout << (a.json ? estimate::to_json(plan) + "\n" : estimate::to_table(plan));
}

// Stage 3 keeps the unit in use and the one prefetched whole: two transformer blocks
// (12 C^2 + 13 C elements each) for the gpt presets.
int64_t default_live_params(const EstimateArgs& a) {
  if (a.live_params >= 0) return a.live_params;
  if (a.model != "gpt") return 0;
  const int64_t c = models::gpt_preset(a.preset).n_embd;
  return 2 * (12 * c * c + 13 * c);
}

void run_estimate(const EstimateArgs& a, const estimate::PresetParamCount& preset_count) {
  if (!a.ram.empty() || !a.disk.empty()) return run_choose(a);
  ZOFF_CHECK_ARG(a.plan_file.empty(), "--plan ", a.plan_file,
                 ": a file to write needs --ram and --disk (the planner that chooses)");
  if (a.plan) return run_plan(a);
  ZOFF_CHECK_ARG(a.config.empty(), "--config ", a.config, ": only with --plan");
  estimate::EstimateOptions o;
  if (!a.params.empty()) {
    if (!a.model.empty() || !a.preset.empty()) {
      throw UsageError("--params and --model/--preset: give one or the other");
    }
    o.params = estimate::parse_param_count(a.params);
  } else if (!a.model.empty() && !a.preset.empty()) {
    o.params = preset_count(a.model, a.preset);
  } else if (!a.model.empty() || !a.preset.empty()) {
    throw UsageError("--model and --preset go together, e.g. --model gpt --preset small");
  } else {
    throw UsageError("give --params N (e.g. 1.3B) or --model gpt --preset P");
  }
  o.ranks = a.ranks;
  o.nodes = a.nodes;
  o.offload = estimate::parse_offload(a.offload);
  o.precision = estimate::parse_precision(a.precision);
  o.state_dtype = optim::parse_state_dtype(a.state_dtype);
  ZOFF_CHECK_ARG(a.live_params >= -1, "--live-params ", a.live_params, ": must be >= 0");
  o.live_params = default_live_params(a);
  o.host_shared_params = a.host_shared_params;
  o.split_master = !a.no_split_master;
  const estimate::MemoryEstimate m = estimate::estimate_memory(o);
  std::cout << (a.json ? estimate::to_json(m) + "\n" : estimate::to_table(m));
}

void add_estimate(CLI::App& root, int& exit_code) {
  auto args = std::make_shared<EstimateArgs>();
  CLI::App* cmd = root.add_subcommand(
      "estimate", "Model-state memory per rank and per node for ZeRO stages 0-3");
  cmd->add_option("--params", args->params, "Parameter count: 7.5e9, 1.3B, 350M, ...");
  cmd->add_option("--model", args->model, "Model with presets: gpt");
  cmd->add_option("--preset", args->preset,
                  std::string("Preset of --model (gpt: ") + models::kGptPresetNames + ")");
  cmd->add_option("--ranks", args->ranks, "Data-parallel ranks in all (default 1)");
  cmd->add_option("--nodes", args->nodes, "Nodes; must divide --ranks (default 1)");
  cmd->add_option("--offload", args->offload, "Optimizer offload: none|cpu|nvme (default none)");
  cmd->add_option("--precision", args->precision, "fp32|bf16|fp16 (default bf16)");
  cmd->add_option("--state-dtype", args->state_dtype,
                  "Adam state storage: fp32|bf16|int8 (optimizer.state_dtype, default fp32)");
  cmd->add_option("--live-params", args->live_params,
                  "Stage 3: elements of units whole at once (default: 2 blocks for gpt)");
  cmd->add_flag("--host-shared-params", args->host_shared_params,
                "Stages 1-2: one copy of the parameters per node that its ranks share, as "
                "zoff train keeps with every rank on one host (needs --nodes 1)");
  cmd->add_flag("--no-split-master", args->no_split_master,
                "nvme with bf16: count a 4-byte fp32 master, not the split one (bf16 "
                "parameter + 16-bit extension; offload_optimizer.split_master = false)");
  cmd->add_flag("--json", args->json, "Print JSON instead of a table");
  cmd->add_option("--plan", args->plan_file,
                  "Plan a whole training run: peak RSS and disk bytes of one rank of `zoff "
                  "train --model gpt --preset P --config C` (needs --config); with --ram and "
                  "--disk, --plan FILE writes the cheapest candidate that fits as a config")
      ->expected(0, 1);
  cmd->add_option("--ram", args->ram,
                  "Choose: the memory every rank of the run may take together (24GiB, 70GB)");
  cmd->add_option("--disk", args->disk,
                  "Choose: the disk the tier files may take (all ranks; 0 for none)");
  cmd->add_option("--micro-batch", args->micro_batch,
                  "Choose: samples per rank per micro-batch without --config (default 1)");
  cmd->add_option("--nvme-path", args->nvme_path,
                  "Choose: the directory a candidate's tier files go to (default: the "
                  "--config's nvme_path, else /var/tmp/zoff_nvme)");
  cmd->add_option("--config", args->config, "--plan: the run's DeepSpeed-style JSON config");
  cmd->add_option("--context", args->context, "--plan: gpt context (0 = the preset's)");
  cmd->add_option("--layers", args->layers, "--plan: gpt blocks (0 = the preset's)");
  cmd->add_option("--attention", args->attention,
                  "--plan: gpt attention kernel: auto, materialized or flash (as zoff train's)")
      ->check(CLI::IsMember({"auto", "materialized", "flash"}))
      ->capture_default_str();
  cmd->add_flag("--activation-checkpointing", args->activation_checkpointing,
                "--plan: the run recomputes each block in backward");
  cmd->callback([cmd, args, &exit_code] {
    args->plan = cmd->count("--plan") > 0;
    run_estimate(*args, preset_param_count);
    exit_code = 0;
  });
}

}  // namespace
}  // namespace zoff::cli

ZOFF_REGISTER_COMMAND(estimate, zoff::cli::add_estimate);
