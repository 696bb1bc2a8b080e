// The planner that chooses: candidate placements of one run, planned, checked against a budget.
#include "zoff/estimate/plan_choice.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "zoff/config/config_json.h"
#include "zoff/core/error.h"

namespace zoff::estimate {
namespace {

// Step time factors against stage 2 with every state in memory, from zoff's own runs on
// these 2-core machines (docs/figures.md): the CPU's forward and backward dominate a step,
// so moving states costs little and recomputing activations costs a forward.
//  - compressed states: the optimizer pass is a few percent of a gpt step; bf16 and int8
//    states ran at 1.0-1.35x the fp32 pass ("Compressed optimizer states");
constexpr double kBf16StatesStep = 1.01;
constexpr double kInt8StatesStep = 1.02;
//  - optimizer on NVMe, its step overlapped with backward: 0.999x and 1.028x the cpu
//    offload step at gpt medium ("The NVMe tier");
constexpr double kOptimizerOnDiskStep = 1.03;
//  - stage 3's parameter pieces on disk: units read ahead of use, and glibc returning
//    released units to the kernel (README, "What is not done yet"): about a tenth;
constexpr double kParamsOnDiskStep = 1.10;
//  - stage 3 in memory on several ranks: an all-gather per unit in forward and backward;
constexpr double kStage3Step = 1.05;
//  - activation checkpointing: one more forward of every block in backward.
constexpr double kCheckpointingStep = 1.33;
//  - the split master: its disk step moves 2 bytes less per element and adds two passes over
//    each sub-group in memory; counted as the 4-byte master's step (listed first, so chosen
//    when both fit).
constexpr double kSplitMasterStep = 1.0;
//  - the split master in memory: the fused pass also joins and splits every master (in
//    L2), at 0.87x (fp32 states) and 0.71x (int8) the 4-byte master's rate (`zoff bench
//    optim`, 50M parameters), on a pass of a few percent of a gpt step: chosen only when
//    the 2 bytes of RAM per element it saves are needed.
constexpr double kSplitMasterInMemoryStep = 1.01;
//  - the gradient shard on disk: each reduced bucket read, added and written back, and read
//    again with its sub-group (streamed gradients are consumed by the overlapped step the
//    disk candidates already count).
constexpr double kGradsOnDiskStep = 1.05;

double relative_step(const CandidateSpec& s) {
  double f = 1.0;
  if (s.states == optim::StateDtype::kBf16) f *= kBf16StatesStep;
  if (s.states == optim::StateDtype::kInt8) f *= kInt8StatesStep;
  if (s.optimizer_on_disk) f *= kOptimizerOnDiskStep;
  if (s.params_on_disk) f *= kParamsOnDiskStep;
  if (s.stage == 3 && !s.params_on_disk) f *= kStage3Step;
  if (s.activation_checkpointing) f *= kCheckpointingStep;
  if (s.split_master) f *= s.optimizer_on_disk ? kSplitMasterStep : kSplitMasterInMemoryStep;
  if (s.gradients == "nvme") f *= kGradsOnDiskStep;
  return f;
}

std::string describe(const CandidateSpec& s) {
  std::string name = "stage " + std::to_string(s.stage) + ", optimizer ";
  name += s.optimizer_on_disk ? "nvme" : "cpu";
  if (s.params_on_disk) name += ", parameters nvme";
  name += ", " + optim::state_dtype_name(s.states) + " states";
  if (s.split_master) name += ", split master";
  if (s.gradients == "stream") name += ", gradients streamed";
  if (s.gradients == "nvme") name += ", gradients nvme";
  if (s.activation_checkpointing) name += ", checkpointing";
  return name;
}

// The placements worth trying on `world` ranks: stage 2 with the optimizer in memory or on
// disk, stage 3 with the parameters on disk too, and stage 3 in memory where several ranks
// share the parameters.
std::vector<CandidateSpec> placements(int world) {
  std::vector<CandidateSpec> out;
  out.push_back({2, false, false});
  if (world > 1) out.push_back({3, false, false});
  out.push_back({2, true, false});
  out.push_back({3, true, true});
  return out;
}

// Where the gradient shard may go for a candidate: in memory, and with the optimizer on disk
// the base's own disk choice (nvme, stream) or else the one it can run (streamed where the
// step can overlap a single backward, else on disk; neither with fp16).
std::vector<std::string> gradient_places(const config::Config& base, const CandidateSpec& s) {
  const std::string& asked = base.zero.offload_optimizer.gradients;
  if (!s.optimizer_on_disk) return {"cpu"};
  if (asked == "nvme" || asked == "stream") return {asked};
  if (asked == "cpu" || base.fp16.enabled) return {"cpu"};
  return {"cpu", placement::why_not_streamed(base).empty() ? "stream" : "nvme"};
}

// Whether `base` can run the candidate at all: compressed states are Adam's and AdamW's only,
// and the delayed parameter update needs the optimizer in memory at stages 1-2.
bool expressible(const config::Config& base, const CandidateSpec& s) {
  const bool adam = base.optimizer.type == "adam" || base.optimizer.type == "adamw";
  if (s.states != optim::StateDtype::kFp32 && !adam) return false;
  const bool dpu = base.zero.offload_optimizer.delayed_param_update;
  return !(dpu && (s.optimizer_on_disk || s.stage == 3));
}

// Every candidate `base` can run on `world` ranks: each placement with each state dtype,
// with and without activation checkpointing, and with bf16 the split master or not,
// the gradients where gradient_places() allows.
std::vector<CandidateSpec> candidate_specs(const config::Config& base, int world) {
  std::vector<CandidateSpec> out;
  for (const CandidateSpec& place : placements(world)) {
    for (const auto states :
         {optim::StateDtype::kFp32, optim::StateDtype::kBf16, optim::StateDtype::kInt8}) {
      for (const bool checkpointing : {false, true}) {
        for (const bool split : {true, false}) {
          CandidateSpec spec = place;
          spec.states = states;
          spec.activation_checkpointing = checkpointing;
          spec.split_master = split;
          // In memory the delayed update steps an fp32 master of its own.
          if (split && !(base.bf16 && (place.optimizer_on_disk ||
                                       !base.zero.offload_optimizer.delayed_param_update)))
            continue;
          if (!expressible(base, spec)) continue;
          for (const std::string& grads : gradient_places(base, spec)) {
            spec.gradients = grads;
            out.push_back(spec);
          }
        }
      }
    }
  }
  return out;
}

config::Config candidate_config(const config::Config& base, const CandidateSpec& s,
                                const std::string& nvme_path) {
  config::Config c = base;
  // The gradient shard where the candidate puts it ("auto" would decide by the memory free
  // at start).
  c.zero.offload_optimizer.gradients = s.gradients;
  c.zero.stage = s.stage;
  c.zero.offload_optimizer.device = s.optimizer_on_disk ? "nvme" : "cpu";
  c.zero.offload_optimizer.nvme_paths.clear();
  if (s.optimizer_on_disk) c.zero.offload_optimizer.nvme_paths = {nvme_path};
  c.zero.offload_param.device = s.params_on_disk ? "nvme" : "none";
  c.zero.offload_param.nvme_paths.clear();
  if (s.params_on_disk) c.zero.offload_param.nvme_paths = {nvme_path};
  c.optimizer.state_dtype = optim::state_dtype_name(s.states);
  c.activation_checkpointing = s.activation_checkpointing;
  // Written either way where it applies, so the config says which master it plans for.
  c.zero.offload_optimizer.split_master.reset();
  if (c.bf16 && (s.optimizer_on_disk || s.split_master))
    c.zero.offload_optimizer.split_master = s.split_master;
  // Through the parser once: every rule a written config meets when it is read back.
  return config::parse_config(config::normalized_config_json(c), base.world_size);
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / double(int64_t{1} << 30));
  return buf;
}

}  // namespace

std::vector<Candidate> plan_candidates(const config::Config& base, int world,
                                       const std::string& nvme_path,
                                       const std::function<PlanModel(bool)>& model_for,
                                       const MachineBudget& budget) {
  ZOFF_CHECK_ARG(budget.ram_bytes > 0, "--ram: ", budget.ram_bytes, " bytes: must be > 0");
  ZOFF_CHECK_ARG(budget.disk_bytes >= 0, "--disk: ", budget.disk_bytes, " bytes: must be >= 0");
  ZOFF_CHECK_ARG(!nvme_path.empty(), "--nvme-path: must name a directory");
  ZOFF_CHECK_ARG(world >= 1, "--ranks ", world, ": must be >= 1");
  const PlanModel plain = model_for(false), checkpointed = model_for(true);
  std::vector<Candidate> out;
  for (const CandidateSpec& spec : candidate_specs(base, world)) {
    Candidate cand;
    cand.spec = spec;
    cand.name = describe(spec);
    cand.relative_step = relative_step(spec);
    cand.config = candidate_config(base, spec, nvme_path);
    cand.plan = plan_run(cand.config, world, spec.activation_checkpointing ? checkpointed : plain);
    cand.ram_bytes = cand.plan.host_bytes * world;
    cand.disk_bytes = cand.plan.disk_bytes * world;
    cand.fits = fits_budget(cand.ram_bytes, cand.disk_bytes, budget);
    out.push_back(std::move(cand));
  }
  // Cheapest first; among equals the one needing less disk (the split master), then less
  // memory.
  std::stable_sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    if (a.relative_step != b.relative_step) return a.relative_step < b.relative_step;
    if (a.disk_bytes != b.disk_bytes) return a.disk_bytes < b.disk_bytes;
    return a.ram_bytes < b.ram_bytes;
  });
  return out;
}

// A prediction within 10% of the measured peak allows a peak up to prediction / 0.9.
bool fits_budget(int64_t ram, int64_t disk, const MachineBudget& budget) {
  return static_cast<double>(ram) / (1 - kRamMargin) <= static_cast<double>(budget.ram_bytes) &&
         static_cast<double>(disk) / (1 - kDiskMargin) <= static_cast<double>(budget.disk_bytes);
}

const Candidate* cheapest_fitting(const std::vector<Candidate>& candidates) {
  for (const auto& c : candidates) {
    if (c.fits) return &c;
  }
  return nullptr;
}

std::string candidates_table(const std::vector<Candidate>& candidates,
                             const MachineBudget& budget) {
  const Candidate* chosen = cheapest_fitting(candidates);
  std::ostringstream os;
  os << "budget: " << gib(budget.ram_bytes) << " GiB RAM, " << gib(budget.disk_bytes)
     << " GiB disk (all ranks); a candidate fits with " << static_cast<int>(kRamMargin * 100)
     << "% RAM and " << static_cast<int>(kDiskMargin * 100)
     << "% disk to spare (the planner's accuracy)\n";
  os << "  step  RAM GiB  disk GiB  fits  candidate\n";
  for (const auto& c : candidates) {
    char line[96];
    std::snprintf(line, sizeof line, "%6.2f %8s %9s  %-4s  ", c.relative_step,
                  gib(c.ram_bytes).c_str(), gib(c.disk_bytes).c_str(), c.fits ? "yes" : "no");
    os << line << c.name << (&c == chosen ? "   <- chosen" : "") << "\n";
  }
  if (chosen == nullptr) os << "nothing fits: more RAM or disk, or a smaller model or batch\n";
  return os.str();
}

int64_t parse_byte_size(const std::string& flag, const std::string& text) {
  struct Unit {
    const char* suffix;
    double bytes;
  };
  static const Unit kUnits[] = {{"TiB", 1099511627776.0},
                                {"GiB", 1073741824.0},
                                {"MiB", 1048576.0},
                                {"KiB", 1024.0},
                                {"TB", 1e12},
                                {"GB", 1e9},
                                {"MB", 1e6},
                                {"KB", 1e3},
                                {"B", 1.0}};
  std::string number = text;
  double scale = 1.0;
  for (const auto& u : kUnits) {
    const std::string s = u.suffix;
    if (text.size() > s.size() && text.compare(text.size() - s.size(), s.size(), s) == 0) {
      number = text.substr(0, text.size() - s.size());
      scale = u.bytes;
      break;
    }
  }
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ZOFF_CHECK_ARG(used == number.size() && !number.empty() && std::isfinite(value) && value >= 0 &&
                     value * scale < 9.2e18,
                 flag, " = '", text, "': expected a size such as 24GiB, 70GB or 512MiB");
  return static_cast<int64_t>(value * scale);
}

}  // namespace zoff::estimate
