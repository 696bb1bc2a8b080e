// normalized_config_json: a Config written back as the DeepSpeed-style JSON it stands for.
#include "zoff/config/config_json.h"

#include <nlohmann/json.hpp>

namespace zoff::config {
namespace {

using ojson = nlohmann::ordered_json;

// DeepSpeed's spelling of the optimizer types zoff keeps in lower case.
std::string optimizer_type_name(const std::string& type) {
  if (type == "adamw") return "AdamW";
  if (type == "adam") return "Adam";
  if (type == "sgd") return "SGD";
  if (type == "adagrad") return "Adagrad";
  return type;
}

ojson optimizer_json(const optim::OptimizerOptions& o) {
  ojson params = {{"lr", o.lr},
                  {"betas", {o.beta1, o.beta2}},
                  {"eps", o.eps},
                  {"weight_decay", o.weight_decay},
                  {"momentum", o.momentum},
                  {"dampening", o.dampening},
                  {"nesterov", o.nesterov},
                  {"lr_decay", o.lr_decay},
                  {"initial_accumulator_value", o.initial_accumulator_value}};
  if (o.type == "adam" || o.type == "adamw") params["adam_w_mode"] = o.type == "adamw";
  return {
      {"type", optimizer_type_name(o.type)}, {"state_dtype", o.state_dtype}, {"params", params}};
}

ojson scheduler_json(const SchedulerConfig& s) {
  ojson params = {{"warmup_min_lr", s.warmup_min_lr},       {"warmup_max_lr", s.warmup_max_lr},
                  {"warmup_num_steps", s.warmup_num_steps}, {"warmup_type", s.warmup_type},
                  {"warmup_min_ratio", s.warmup_min_ratio}, {"cos_min_ratio", s.cos_min_ratio}};
  // 0 = not given (WarmupLR has no end), which the parser refuses when written out.
  if (s.total_num_steps > 0) params["total_num_steps"] = s.total_num_steps;
  return {{"type", s.type}, {"params", params}};
}

// nvme_path as written: one directory as a string ("" for none), several as a list.
ojson paths_json(const std::vector<std::string>& paths) {
  if (paths.size() > 1) return paths;
  return paths.empty() ? std::string() : paths.front();
}

ojson zero_json(const ZeroConfig& z) {
  const OffloadConfig& oo = z.offload_optimizer;
  const OffloadParamConfig& op = z.offload_param;
  ojson out = {{"stage", z.stage},
               {"reduce_bucket_size", z.reduce_bucket_size},
               {"allgather_bucket_size", z.allgather_bucket_size},
               {"overlap_comm", z.overlap_comm},
               {"contiguous_gradients", z.contiguous_gradients},
               {"host_shared_params", z.host_shared_params},
               {"sub_group_size", z.sub_group_size},
               {"stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size},
               {"stage3_max_live_parameters", z.stage3_max_live_parameters},
               {"stage3_param_persistence_threshold", z.stage3_param_persistence_threshold},
               {"offload_optimizer",
                {{"device", oo.device},
                 {"pin_memory", oo.pin_memory},
                 {"nvme_path", paths_json(oo.nvme_paths)},
                 {"buffer_count", oo.buffer_count},
                 {"overlap_step", oo.overlap_step},
                 {"gradients", oo.gradients},
                 {"stream_buffers", oo.stream_buffers},
                 {"delayed_param_update",
                  {{"enabled", oo.delayed_param_update}, {"warmup_steps", oo.dpu_warmup_steps}}}}},
               {"offload_param",
                {{"device", op.device},
                 {"pin_memory", op.pin_memory},
                 {"nvme_path", paths_json(op.nvme_paths)},
                 {"max_in_cpu", op.max_in_cpu}}}};
  // Unset means "wherever it applies": only a choice made is written.
  if (oo.split_master) out["offload_optimizer"]["split_master"] = *oo.split_master;
  return out;
}

ojson aio_json(const AioConfig& a) {
  return {{"block_size", a.block_size},         {"queue_depth", a.queue_depth},
          {"thread_count", a.thread_count},     {"single_submit", a.single_submit},
          {"overlap_events", a.overlap_events}, {"backend", a.backend}};
}

ojson fp16_json(const Fp16Config& f) {
  return {{"enabled", f.enabled},
          {"loss_scale", f.loss_scale},
          {"initial_scale_power", f.initial_scale_power},
          {"loss_scale_window", f.loss_scale_window},
          {"hysteresis", f.hysteresis},
          {"min_loss_scale", f.min_loss_scale}};
}

}  // namespace

std::string normalized_config_json(const Config& c) {
  ojson j;
  j["train_batch_size"] = c.train_batch_size;
  j["train_micro_batch_size_per_gpu"] = c.train_micro_batch_size_per_gpu;
  j["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  j["gradient_clipping"] = c.gradient_clipping;
  j["steps_per_print"] = c.steps_per_print;
  j["wall_clock_breakdown"] = c.wall_clock_breakdown;
  j["optimizer"] = optimizer_json(c.optimizer);
  if (!c.scheduler.type.empty()) j["scheduler"] = scheduler_json(c.scheduler);
  j["zero_optimization"] = zero_json(c.zero);
  j["aio"] = aio_json(c.aio);
  j["bf16"] = {{"enabled", c.bf16}};
  j["fp16"] = fp16_json(c.fp16);
  if (c.activation_checkpointing) j["activation_checkpointing"] = ojson::object();
  return j.dump();
}

}  // namespace zoff::config
