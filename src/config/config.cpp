// Parses and validates the DeepSpeed-style JSON training config into zoff::config::Config.
#include "zoff/config/config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::config {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const json& value, const std::string& why) {
  // Configs written for the Hugging Face Trainer carry "auto" where it fills in a value.
  const std::string hint = value == json("auto")
                               ? " (\"auto\" is a Hugging Face Trainer placeholder that its "
                                 "DeepSpeed integration replaces; zoff needs the value itself)"
                               : "";
  throw UsageError("config: " + path + " = " + value.dump() + ": " + why + hint);
}

// One JSON object of the config. Reads are typed and remember which keys were read, so the
// keys nobody read can be reported as unknown afterwards.
class Section {
 public:
  Section(const json& obj, std::string path, std::vector<std::string>* warnings)
      : obj_(obj), path_(std::move(path)), warnings_(warnings) {}

  std::string path_of(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  const json* get(const std::string& key) {
    known_.insert(key);
    auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }

  std::optional<bool> boolean(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) fail(path_of(key), *v, "must be true or false");
    return v->get<bool>();
  }

  std::optional<double> number(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) fail(path_of(key), *v, "must be a number");
    const double d = v->get<double>();
    if (!std::isfinite(d)) fail(path_of(key), *v, "must be finite");
    return d;
  }

  // Integers may be written 5e8 (a JSON float with an integral value), as DeepSpeed configs do.
  std::optional<int64_t> integer(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() &&
          v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(path_of(key), *v, "is too large");
      }
      return v->get<int64_t>();
    }
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
        return static_cast<int64_t>(d);
      }
    }
    fail(path_of(key), *v, "must be an integer");
  }

  std::optional<std::string> string(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail(path_of(key), *v, "must be a string");
    return v->get<std::string>();
  }

  // A directory or a list of them (one string, or a non-empty array of distinct non-empty
  // strings): several directories stripe a tier across drives.
  std::optional<std::vector<std::string>> paths(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_string()) {  // "" is no directory, as an absent key
      const auto one = v->get<std::string>();
      return one.empty() ? std::vector<std::string>{} : std::vector<std::string>{one};
    }
    if (!v->is_array() || v->empty()) {
      fail(path_of(key), *v, "must be a directory or a non-empty list of directories");
    }
    std::vector<std::string> out;
    for (const auto& e : *v) {
      if (!e.is_string() || e.get<std::string>().empty()) {
        fail(path_of(key), *v, "every entry must be a non-empty string (a directory)");
      }
      if (std::find(out.begin(), out.end(), e.get<std::string>()) != out.end()) {
        fail(path_of(key), *v, "lists " + e.dump() + " twice (one stripe per directory)");
      }
      out.push_back(e.get<std::string>());
    }
    return out;
  }

  std::optional<Section> section(const std::string& key) {
    const json* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_object()) fail(path_of(key), *v, "must be a JSON object");
    return Section(*v, path_of(key), warnings_);
  }

  // Call once every known key has been read.
  void warn_unknown() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (known_.count(it.key()) == 0) {
        warnings_->push_back("config: unknown key '" + path_of(it.key()) + "' (ignored)");
      }
    }
  }

 private:
  const json& obj_;
  std::string path_;
  std::vector<std::string>* warnings_;
  std::set<std::string> known_;
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Reads `key` when present and checks it; `ok` says whether the value is allowed.
template <typename T, typename Ok>
void read_checked(std::optional<T> value, T* out, Section& s, const std::string& key, Ok ok,
                  const char* rule) {
  if (!value) return;
  if (!ok(*value)) fail(s.path_of(key), json(*value), rule);
  *out = *value;
}

void parse_batch(Section& top, Config& c) {
  auto positive = [](int64_t v) { return v > 0; };
  std::optional<int64_t> train = top.integer("train_batch_size");
  std::optional<int64_t> micro = top.integer("train_micro_batch_size_per_gpu");
  std::optional<int64_t> accum = top.integer("gradient_accumulation_steps");
  int64_t unused = 0;
  read_checked(train, &unused, top, "train_batch_size", positive, "must be > 0");
  read_checked(micro, &unused, top, "train_micro_batch_size_per_gpu", positive, "must be > 0");
  read_checked(accum, &unused, top, "gradient_accumulation_steps", positive, "must be > 0");
  const int64_t w = c.world_size;
  if (!train && !micro) {
    throw UsageError(
        "config: train_batch_size or train_micro_batch_size_per_gpu must be given (DeepSpeed "
        "needs at least one)");
  }
  // Same resolution order as DeepSpeed's _set_batch_related_parameters; the derived value
  // must reproduce train_batch_size exactly, else the division was not exact.
  if (train && micro && accum) {
    // nothing to derive
  } else if (train && micro) {
    accum = *train / (*micro * w);
  } else if (train && accum) {
    micro = *train / (w * *accum);
  } else if (micro && accum) {
    train = *micro * *accum * w;
  } else if (train) {
    accum = 1;
    micro = *train / w;
  } else {
    train = *micro * w;
    accum = 1;
  }
  if (*micro <= 0 || *accum <= 0 || *train != *micro * *accum * w) {
    std::ostringstream os;
    os << "config: train_batch_size = " << *train << ": must equal train_micro_batch_size_per_gpu ("
       << *micro << ") * gradient_accumulation_steps (" << *accum << ") * world size (" << w << ")";
    throw UsageError(os.str());
  }
  c.train_batch_size = *train;
  c.train_micro_batch_size_per_gpu = *micro;
  c.gradient_accumulation_steps = *accum;
}

// optimizer.state_dtype (zoff): how Adam's exp_avg / exp_avg_sq are stored, beside "type"
// because it picks the storage, not a hyper-parameter. Checked here (the config area does
// not link the optim kernels); the spelling matches optim::parse_state_dtype.
void parse_state_dtype_key(Section& opt, optim::OptimizerOptions& o) {
  std::optional<std::string> dtype = opt.string("state_dtype");
  if (!dtype) return;
  if (*dtype != "fp32" && *dtype != "bf16" && *dtype != "int8") {
    fail(opt.path_of("state_dtype"), json(*dtype), "must be fp32, bf16 or int8");
  }
  if (*dtype != "fp32" && o.type != "adam" && o.type != "adamw") {
    fail(opt.path_of("state_dtype"), json(*dtype),
         "compressed states are for Adam/AdamW only, not optimizer.type = " + o.type);
  }
  o.state_dtype = *dtype;
}

// optimizer.type, required: AdamW, Adam, SGD or Adagrad in any case; returned lower-case.
std::string parse_optimizer_type(Section& opt) {
  const std::optional<std::string> type = opt.string("type");
  if (!type) throw UsageError("config: optimizer.type is missing (AdamW, Adam, SGD or Adagrad)");
  const std::string t = lower(*type);
  if (t != "adamw" && t != "adam" && t != "sgd" && t != "adagrad") {
    fail(opt.path_of("type"), json(*type), "must be one of AdamW, Adam, SGD, Adagrad");
  }
  return t;
}

// optimizer.params.betas: [beta1, beta2], each in [0, 1).
void parse_betas(Section& p, optim::OptimizerOptions& o) {
  const json* betas = p.get("betas");
  if (betas == nullptr) return;
  const std::string path = p.path_of("betas");
  if (!betas->is_array() || betas->size() != 2 || !(*betas)[0].is_number() ||
      !(*betas)[1].is_number()) {
    fail(path, *betas, "must be a list of two numbers [beta1, beta2]");
  }
  for (int i = 0; i < 2; ++i) {
    const double b = (*betas)[i].get<double>();
    if (!(b >= 0.0 && b < 1.0)) fail(path, *betas, "each beta must be in [0, 1)");
  }
  o.beta1 = (*betas)[0].get<double>();
  o.beta2 = (*betas)[1].get<double>();
}

void parse_optimizer(Section& top, Config& c) {
  std::optional<Section> opt = top.section("optimizer");
  if (!opt) return;
  optim::OptimizerOptions& o = c.optimizer;
  o.type = parse_optimizer_type(*opt);
  parse_state_dtype_key(*opt, o);
  // torch's per-class defaults for what the config leaves out.
  if (o.type == "adagrad") {
    o.lr = 1e-2;
    o.eps = 1e-10;
  }
  std::optional<Section> p = opt->section("params");
  if (!p) {
    if (o.type == "sgd") throw UsageError("config: optimizer.params.lr is required for SGD");
    opt->warn_unknown();
    return;
  }
  auto non_negative = [](double v) { return v >= 0.0; };
  std::optional<double> lr = p->number("lr");
  if (!lr && o.type == "sgd") throw UsageError("config: optimizer.params.lr is required for SGD");
  read_checked(lr, &o.lr, *p, "lr", non_negative, "must be >= 0");
  parse_betas(*p, o);
  read_checked(
      p->number("eps"), &o.eps, *p, "eps", [](double v) { return v > 0.0; }, "must be > 0");
  read_checked(p->number("weight_decay"), &o.weight_decay, *p, "weight_decay", non_negative,
               "must be >= 0");
  read_checked(p->number("momentum"), &o.momentum, *p, "momentum", non_negative, "must be >= 0");
  read_checked(p->number("dampening"), &o.dampening, *p, "dampening", non_negative, "must be >= 0");
  read_checked(
      p->boolean("nesterov"), &o.nesterov, *p, "nesterov", [](bool) { return true; }, "");
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0)) {
    fail(p->path_of("nesterov"), json(true), "needs momentum > 0 and dampening = 0 (as in torch)");
  }
  read_checked(p->number("lr_decay"), &o.lr_decay, *p, "lr_decay", non_negative, "must be >= 0");
  read_checked(p->number("initial_accumulator_value"), &o.initial_accumulator_value, *p,
               "initial_accumulator_value", non_negative, "must be >= 0");
  if (std::optional<bool> w_mode = p->boolean("adam_w_mode")) {
    if (o.type != "adam" && o.type != "adamw") {
      fail(p->path_of("adam_w_mode"), json(*w_mode), "only applies to Adam/AdamW");
    }
    o.type = *w_mode ? "adamw" : "adam";
  }
  p->warn_unknown();
  opt->warn_unknown();
}

void parse_scheduler(Section& top, Config& c) {
  std::optional<Section> sch = top.section("scheduler");
  SchedulerConfig& s = c.scheduler;
  s.warmup_max_lr = c.optimizer.lr;  // zoff's default: the optimizer's lr
  if (!sch) return;
  std::optional<std::string> type = sch->string("type");
  if (!type) throw UsageError("config: scheduler.type is missing");
  if (*type != "WarmupLR" && *type != "WarmupDecayLR" && *type != "WarmupCosineLR") {
    fail(sch->path_of("type"), json(*type), "must be WarmupLR, WarmupDecayLR or WarmupCosineLR");
  }
  s.type = *type;
  std::optional<Section> p = sch->section("params");
  const json no_params = json::object();
  Section empty_params(no_params, sch->path_of("params"), &c.warnings);
  Section& params = p ? *p : empty_params;
  auto non_negative_d = [](double v) { return v >= 0.0; };
  auto ratio = [](double v) { return v >= 0.0 && v <= 1.0; };
  read_checked(params.number("warmup_min_lr"), &s.warmup_min_lr, params, "warmup_min_lr",
               non_negative_d, "must be >= 0");
  read_checked(params.number("warmup_max_lr"), &s.warmup_max_lr, params, "warmup_max_lr",
               non_negative_d, "must be >= 0");
  read_checked(
      params.integer("warmup_num_steps"), &s.warmup_num_steps, params, "warmup_num_steps",
      [](int64_t v) { return v >= 0; }, "must be >= 0");
  read_checked(
      params.string("warmup_type"), &s.warmup_type, params, "warmup_type",
      [](const std::string& v) { return v == "log" || v == "linear"; },
      "must be \"log\" or \"linear\"");
  std::optional<int64_t> total = params.integer("total_num_steps");
  read_checked(
      total, &s.total_num_steps, params, "total_num_steps", [](int64_t v) { return v > 0; },
      "must be > 0");
  read_checked(params.number("warmup_min_ratio"), &s.warmup_min_ratio, params, "warmup_min_ratio",
               ratio, "must be in [0, 1]");
  read_checked(params.number("cos_min_ratio"), &s.cos_min_ratio, params, "cos_min_ratio", ratio,
               "must be in [0, 1]");
  if (s.type != "WarmupLR" && !total) {
    throw UsageError("config: scheduler.params.total_num_steps is required for " + s.type);
  }
  // DeepSpeed clamps warmup to >= 2 steps; its cosine divides by total - warmup.
  const int64_t warmup = std::max<int64_t>(2, s.warmup_num_steps);
  if (s.type == "WarmupCosineLR" && s.total_num_steps <= warmup) {
    fail(params.path_of("total_num_steps"), json(s.total_num_steps),
         "must be > warmup_num_steps (" + std::to_string(warmup) + ") for WarmupCosineLR");
  }
  if (s.type == "WarmupDecayLR" && s.total_num_steps < warmup) {
    c.warnings.push_back(
        "config: scheduler.params.total_num_steps = " + std::to_string(s.total_num_steps) +
        " is less than warmup_num_steps (" + std::to_string(warmup) + ")");
  }
  params.warn_unknown();
  sch->warn_unknown();
}

// DeepSpeed keys zoff accepts but does not use, with what zoff does instead.
void warn_unused(Section& s, const std::vector<std::pair<const char*, const char*>>& keys,
                 std::vector<std::string>& warnings) {
  for (const auto& [key, instead] : keys) {
    if (s.get(key) != nullptr) {
      warnings.push_back("config: " + s.path_of(key) + " is not used by zoff: " + instead);
    }
  }
}

// offload_optimizer: where the optimizer state and its step live (needs stage >= 1).
void parse_offload_optimizer(Section& z, ZeroConfig& zc, std::vector<std::string>& warnings) {
  std::optional<Section> off = z.section("offload_optimizer");
  if (!off) return;
  auto any = [](bool) { return true; };
  OffloadConfig& oc = zc.offload_optimizer;
  read_checked(
      off->string("device"), &oc.device, *off, "device",
      [](const std::string& d) { return d == "none" || d == "cpu" || d == "nvme"; },
      "must be \"none\", \"cpu\" or \"nvme\"");
  read_checked(off->boolean("pin_memory"), &oc.pin_memory, *off, "pin_memory", any, "");
  if (auto paths = off->paths("nvme_path")) oc.nvme_paths = *paths;
  if (std::optional<Section> dpu = off->section("delayed_param_update")) {
    read_checked(dpu->boolean("enabled"), &oc.delayed_param_update, *dpu, "enabled", any, "");
    read_checked(
        dpu->integer("warmup_steps"), &oc.dpu_warmup_steps, *dpu, "warmup_steps",
        [](int64_t v) { return v >= 0; }, "must be >= 0 (steps)");
    if (oc.delayed_param_update && oc.device != "cpu") {
      fail(dpu->path_of("enabled"), json(true), "needs offload_optimizer.device = \"cpu\"");
    }
    dpu->warn_unknown();
  }
  read_checked(off->boolean("overlap_step"), &oc.overlap_step, *off, "overlap_step", any, "");
  read_checked(
      off->string("gradients"), &oc.gradients, *off, "gradients",
      [](const std::string& g) {
        return g == "auto" || g == "cpu" || g == "nvme" || g == "stream";
      },
      "must be \"auto\", \"cpu\", \"nvme\" or \"stream\"");
  if ((oc.gradients == "nvme" || oc.gradients == "stream") && oc.device != "nvme") {
    fail(off->path_of("gradients"), json(oc.gradients),
         "needs zero_optimization.offload_optimizer.device = \"nvme\"");
  }
  read_checked(
      off->integer("buffer_count"), &oc.buffer_count, *off, "buffer_count",
      [](int64_t v) { return v >= 0 && v <= 1024; }, "must be in [0, 1024] (0 = automatic)");
  read_checked(
      off->integer("stream_buffers"), &oc.stream_buffers, *off, "stream_buffers",
      [](int64_t v) { return v >= 0 && v <= 4096; }, "must be in [0, 4096] (0 = automatic)");
  if (auto split = off->boolean("split_master")) oc.split_master = *split;
  if (oc.device == "nvme" && oc.nvme_paths.empty()) {
    fail(off->path_of("device"), json(oc.device),
         "needs zero_optimization.offload_optimizer.nvme_path");
  }
  warn_unused(*off,
              {{"ratio", "all of the optimizer state is offloaded"},
               {"fast_init", "the tier files are preallocated and written once at start"}},
              warnings);
  if (oc.device != "none" && zc.stage == 0) {
    fail(off->path_of("device"), json(oc.device), "needs zero_optimization.stage >= 1");
  }
  off->warn_unknown();
}

void parse_offload_param(Section& z, ZeroConfig& zc, std::vector<std::string>& warnings) {
  std::optional<Section> op = z.section("offload_param");
  if (!op) return;
  auto any = [](bool) { return true; };
  // "nvme" passes the first check so that it gets its own message.
  read_checked(
      op->string("device"), &zc.offload_param.device, *op, "device",
      [](const std::string& d) { return d == "none" || d == "cpu" || d == "nvme"; },
      "must be \"none\", \"cpu\" or \"nvme\"");
  read_checked(op->boolean("pin_memory"), &zc.offload_param.pin_memory, *op, "pin_memory", any, "");
  if (auto paths = op->paths("nvme_path")) zc.offload_param.nvme_paths = *paths;
  if (zc.offload_param.device == "nvme" && zc.offload_param.nvme_paths.empty()) {
    fail(op->path_of("device"), json("nvme"), "needs zero_optimization.offload_param.nvme_path");
  }
  read_checked(
      op->integer("max_in_cpu"), &zc.offload_param.max_in_cpu, *op, "max_in_cpu",
      [](int64_t v) { return v >= 0; }, "must be >= 0 (elements)");
  const char* pool =
      "each unit's piece is read into a buffer of its own size; max_in_cpu "
      "bounds the elements read ahead";
  warn_unused(*op, {{"buffer_count", pool}, {"buffer_size", pool}}, warnings);
  if (zc.offload_param.device != "none" && zc.stage != 3) {
    fail(op->path_of("device"), json(zc.offload_param.device), "needs zero_optimization.stage = 3");
  }
  op->warn_unknown();
}

void parse_stage3(Section& z, ZeroConfig& zc, std::vector<std::string>& warnings) {
  auto non_negative = [](int64_t v) { return v >= 0; };
  read_checked(z.integer("stage3_prefetch_bucket_size"), &zc.stage3_prefetch_bucket_size, z,
               "stage3_prefetch_bucket_size", non_negative, "must be >= 0 (elements)");
  read_checked(
      z.integer("stage3_max_live_parameters"), &zc.stage3_max_live_parameters, z,
      "stage3_max_live_parameters", [](int64_t v) { return v > 0; }, "must be > 0 (elements)");
  read_checked(z.integer("stage3_param_persistence_threshold"),
               &zc.stage3_param_persistence_threshold, z, "stage3_param_persistence_threshold",
               non_negative, "must be >= 0 (elements)");
  const char* saved = "checkpoints are sharded; `zoff export` writes the whole model, streaming";
  warn_unused(z,
              {{"stage3_max_reuse_distance",
                "a unit is released after each use and gathered again; prefetch follows the "
                "order recorded on the first step"},
               {"stage3_gather_16bit_weights_on_model_save", saved},
               {"stage3_gather_fp16_weights_on_model_save", saved},
               {"round_robin_gradients", "each rank reduces its own shard of every unit"},
               {"memory_efficient_linear", "LibTorch's own Linear is used"},
               {"zero_hpz_partition_size", "one partition group: all ranks"},
               {"zero_quantized_weights", "parameters are gathered in the compute dtype"},
               {"zero_quantized_gradients", "gradients are reduced in fp32"},
               {"mics_shard_size", "one partition group: all ranks"}},
              warnings);
  parse_offload_param(z, zc, warnings);
}

void parse_activation_checkpointing(Section& top, Config& c) {
  std::optional<Section> ac = top.section("activation_checkpointing");
  if (!ac) return;
  c.activation_checkpointing = true;
  warn_unused(
      *ac,
      {{"partition_activations", "no model parallelism: checkpoints stay whole on each rank"},
       {"cpu_checkpointing", "activations already live in host memory on a CPU-only machine"},
       {"contiguous_memory_optimization", "checkpoints are ordinary LibTorch tensors"},
       {"number_checkpoints", "one checkpoint per gpt block"},
       {"synchronize_checkpoint_boundary", "CPU execution is synchronous"},
       {"profile", "see the step log's timings instead"}},
      c.warnings);
  ac->warn_unknown();
}

void parse_zero(Section& top, Config& c) {
  std::optional<Section> z = top.section("zero_optimization");
  if (!z) return;
  ZeroConfig& zc = c.zero;
  if (std::optional<int64_t> stage = z->integer("stage")) {
    if (*stage < 0 || *stage > 3) fail(z->path_of("stage"), json(*stage), "must be 0, 1, 2 or 3");
    zc.stage = static_cast<int>(*stage);
  }
  parse_stage3(*z, zc, c.warnings);
  auto positive = [](int64_t v) { return v > 0; };
  read_checked(z->integer("reduce_bucket_size"), &zc.reduce_bucket_size, *z, "reduce_bucket_size",
               positive, "must be > 0 (elements)");
  read_checked(z->integer("allgather_bucket_size"), &zc.allgather_bucket_size, *z,
               "allgather_bucket_size", positive, "must be > 0 (elements)");
  auto any = [](bool) { return true; };
  read_checked(z->boolean("overlap_comm"), &zc.overlap_comm, *z, "overlap_comm", any, "");
  read_checked(z->boolean("contiguous_gradients"), &zc.contiguous_gradients, *z,
               "contiguous_gradients", any, "");
  read_checked(z->boolean("host_shared_params"), &zc.host_shared_params, *z, "host_shared_params",
               any, "");
  read_checked(
      z->integer("sub_group_size"), &zc.sub_group_size, *z, "sub_group_size",
      [](int64_t v) { return v >= 1024; }, "must be >= 1024 (elements)");
  parse_offload_optimizer(*z, zc, c.warnings);
  // DeepSpeed's legacy spelling of offload_optimizer.device = "cpu".
  if (std::optional<bool> legacy = z->boolean("cpu_offload"); legacy && *legacy) {
    ZOFF_CHECK_ARG(!z->get("offload_optimizer"), "config: ", z->path_of("cpu_offload"),
                   " = true and ", z->path_of("offload_optimizer"),
                   " both given: keep offload_optimizer only");
    zc.offload_optimizer.device = "cpu";
    if (zc.stage == 0)
      fail(z->path_of("cpu_offload"), json(true), "needs zero_optimization.stage >= 1");
    c.warnings.push_back("config: " + z->path_of("cpu_offload") +
                         " = true is deprecated (DeepSpeed): read as offload_optimizer.device = "
                         "\"cpu\"");
  }
  z->warn_unknown();
}

// DeepSpeed's aio section: the NVMe tier's request size, queue depth and threads.
void parse_aio(Section& top, Config& c) {
  std::optional<Section> a = top.section("aio");
  if (!a) return;
  AioConfig& ac = c.aio;
  auto any = [](bool) { return true; };
  read_checked(
      a->integer("block_size"), &ac.block_size, *a, "block_size",
      [](int64_t v) { return v >= 4096 && v <= (int64_t{1} << 30) && v % 4096 == 0; },
      "must be a multiple of 4096 in [4096, 2^30] (bytes)");
  read_checked(
      a->integer("queue_depth"), &ac.queue_depth, *a, "queue_depth",
      [](int64_t v) { return v >= 1 && v <= 4096; }, "must be in [1, 4096]");
  read_checked(
      a->integer("thread_count"), &ac.thread_count, *a, "thread_count",
      [](int64_t v) { return v >= 1 && v <= 256; }, "must be in [1, 256]");
  read_checked(a->boolean("single_submit"), &ac.single_submit, *a, "single_submit", any, "");
  read_checked(a->boolean("overlap_events"), &ac.overlap_events, *a, "overlap_events", any, "");
  read_checked(
      a->string("backend"), &ac.backend, *a, "backend",
      [](const std::string& b) { return b == "auto" || b == "io_uring" || b == "threads"; },
      "must be \"auto\", \"io_uring\" or \"threads\"");
  a->warn_unknown();
}

void parse_precision(Section& top, Config& c) {
  auto any = [](bool) { return true; };
  // DeepSpeed accepts the older "bfloat16" spelling too.
  for (const char* key : {"bf16", "bfloat16"}) {
    if (std::optional<Section> b = top.section(key)) {
      read_checked(b->boolean("enabled"), &c.bf16, *b, "enabled", any, "");
      b->warn_unknown();
    }
  }
  if (std::optional<Section> f = top.section("fp16")) {
    Fp16Config& fc = c.fp16;
    read_checked(f->boolean("enabled"), &fc.enabled, *f, "enabled", any, "");
    read_checked(
        f->number("loss_scale"), &fc.loss_scale, *f, "loss_scale",
        [](double v) { return v >= 0.0; }, "must be >= 0 (0 = dynamic)");
    std::optional<int64_t> power = f->integer("initial_scale_power");
    if (power) {
      if (*power < 0 || *power > 64) {
        fail(f->path_of("initial_scale_power"), json(*power), "must be in [0, 64]");
      }
      fc.initial_scale_power = static_cast<int>(*power);
    }
    std::optional<int64_t> window = f->integer("loss_scale_window");
    if (window) {
      if (*window <= 0 || *window > std::numeric_limits<int>::max()) {
        fail(f->path_of("loss_scale_window"), json(*window), "must be > 0");
      }
      fc.loss_scale_window = static_cast<int>(*window);
    }
    std::optional<int64_t> hysteresis = f->integer("hysteresis");
    if (hysteresis) {
      if (*hysteresis < 1 || *hysteresis > std::numeric_limits<int>::max()) {
        fail(f->path_of("hysteresis"), json(*hysteresis), "must be >= 1");
      }
      fc.hysteresis = static_cast<int>(*hysteresis);
    }
    read_checked(
        f->number("min_loss_scale"), &fc.min_loss_scale, *f, "min_loss_scale",
        [](double v) { return v > 0.0; }, "must be > 0");
    f->warn_unknown();
  }
  if (c.bf16 && c.fp16.enabled) {
    throw UsageError("config: bf16.enabled = true and fp16.enabled = true: enable at most one");
  }
}

// nlohmann reports a byte offset; people want line and column.
std::string line_column(const std::string& text, size_t byte) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

json parse_json(const std::string& text) {
  // Duplicate keys in one object would silently keep the last one; DeepSpeed refuses them.
  std::vector<std::set<std::string>> open_objects;
  std::vector<std::string> path;
  json::parser_callback_t check_duplicates = [&](int depth, json::parse_event_t event,
                                                 json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!open_objects.back().insert(key).second) {
        throw UsageError("config: duplicate key '" + key + "' (at depth " + std::to_string(depth) +
                         ")");
      }
    }
    return true;
  };
  try {
    return json::parse(text, check_duplicates);
  } catch (const json::out_of_range& e) {
    // "1e999": nlohmann refuses numbers beyond double; name the number, not the exception.
    std::string what = e.what();
    const size_t at = what.find("number overflow");
    throw UsageError("config: " + (at == std::string::npos ? what : what.substr(at)) +
                     ": must fit a double");
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // Keep nlohmann's reason, drop its "[json.exception.parse_error.101] parse error at ..."
    // prefix.
    const size_t colon = what.find(": ");
    const std::string reason = colon == std::string::npos ? what : what.substr(colon + 2);
    const size_t at = e.byte == 0 ? 0 : e.byte - 1;
    throw UsageError("config: malformed JSON at " + line_column(text, at) + ": " + reason);
  }
}

}  // namespace

Config parse_config(const std::string& json_text, int world_size) {
  ZOFF_CHECK_ARG(world_size >= 1, "config: world size = ", world_size, ": must be >= 1");
  const json root = parse_json(json_text);
  if (!root.is_object()) {
    throw UsageError("config: top level = " + root.dump().substr(0, 40) +
                     ": must be a JSON object");
  }
  Config c;
  c.world_size = world_size;
  Section top(root, "", &c.warnings);
  parse_batch(top, c);
  read_checked(
      top.number("gradient_clipping"), &c.gradient_clipping, top, "gradient_clipping",
      [](double v) { return v >= 0.0; }, "must be >= 0 (0 = off)");
  read_checked(
      top.integer("steps_per_print"), &c.steps_per_print, top, "steps_per_print",
      [](int64_t v) { return v > 0; }, "must be > 0");
  read_checked(
      top.boolean("wall_clock_breakdown"), &c.wall_clock_breakdown, top, "wall_clock_breakdown",
      [](bool) { return true; }, "");
  parse_optimizer(top, c);
  parse_scheduler(top, c);
  parse_zero(top, c);
  parse_precision(top, c);
  parse_aio(top, c);
  parse_activation_checkpointing(top, c);
  top.warn_unknown();
  return c;
}

Config load_config(const std::string& path, int world_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("config: cannot open config file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UsageError("config: cannot read config file '" + path + "'");
  try {
    return parse_config(text.str(), world_size);
  } catch (const UsageError& e) {
    // "config: ..." -> "config 'path': ..." so the file is named too.
    std::string what = e.what();
    if (what.rfind("config: ", 0) == 0) what = "config '" + path + "': " + what.substr(8);
    throw UsageError(what);
  }
}

}  // namespace zoff::config
