// StepLog: the JSONL training log `zoff report` reads.
#include "zoff/train/step_log.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "zoff/core/error.h"

namespace zoff::train {
namespace {

nlohmann::json tier_json(const engine::TierBytes& t) {
  return {{"params", t.params}, {"grads", t.grads},     {"master", t.master},
          {"optim", t.optim},   {"buffers", t.buffers}, {"total", t.total()}};
}

nlohmann::json times_json(const StepRecord& r) {
  const auto& t = r.times;
  return {{"forward", r.forward_ms},
          {"backward", t.backward_ms},
          {"backward_reduce", t.backward_reduce_ms},
          {"step", t.step_ms},
          {"grad_norm", t.grad_norm_ms},
          {"optimizer", t.optimizer_ms},
          {"allgather", t.allgather_ms},
          {"io_wait_params", t.io_params_ms},
          {"io_wait_grad_window", t.io_grad_window_ms},
          {"io_wait_optimizer", t.io_optimizer_ms}};
}

}  // namespace

std::string step_times_line(const StepRecord& r) {
  const auto& t = r.times;
  char line[384];
  int n = std::snprintf(
      line, sizeof line,
      "step %lld | time (ms): forward %.1f | backward %.1f (reduce wait %.1f) | step "
      "%.1f (grad norm %.1f, optimizer %.1f, allgather %.1f)",
      static_cast<long long>(r.step), r.forward_ms, t.backward_ms, t.backward_reduce_ms, t.step_ms,
      t.grad_norm_ms, t.optimizer_ms, t.allgather_ms);
  const double io = t.io_params_ms + t.io_grad_window_ms + t.io_optimizer_ms;
  if (io > 0.0 && n > 0 && static_cast<size_t>(n) < sizeof line) {
    std::snprintf(line + n, sizeof line - static_cast<size_t>(n),
                  " | I/O wait %.1f (parameters %.1f, gradient window %.1f, disk step %.1f)", io,
                  t.io_params_ms, t.io_grad_window_ms, t.io_optimizer_ms);
  }
  return line;
}

StepLog::StepLog(const std::string& path, bool append) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  ZOFF_CHECK_ARG(file_ != nullptr, "--log ", path,
                 ": cannot open for writing: ", std::strerror(errno));
}

StepLog::~StepLog() {
  if (file_ != nullptr) std::fclose(file_);
}

std::string StepLog::to_json(const StepRecord& r) {
  nlohmann::json j;
  j["step"] = r.step;
  j["loss"] = r.loss;
  j["lr"] = r.lr;
  j["grad_norm"] = r.grad_norm;
  j["samples_per_s"] = r.samples_per_s;
  if (r.tokens_per_s > 0) j["tokens_per_s"] = r.tokens_per_s;
  if (r.loss_scale > 0) j["loss_scale"] = r.loss_scale;
  if (r.skipped) j["skipped"] = true;
  if (r.peak_rss > 0) j["peak_rss"] = r.peak_rss;
  if (r.timed) j["times_ms"] = times_json(r);
  if (!r.transport.empty()) j["comm"] = {{"transport", r.transport}, {"hosts", r.hosts}};
  j["mem"] = {{"params", r.mem.params()},
              {"grads", r.mem.grads()},
              {"optim", r.mem.optim()},
              {"buffers", r.mem.buffers()},
              {"compute", tier_json(r.mem.compute)},
              {"offload", tier_json(r.mem.offload)}};
  if (r.mem.nvme.total() > 0) j["mem"]["nvme"] = tier_json(r.mem.nvme);  // bytes on disk
  // Not model state: bytes forward kept for backward, measured from the CPU allocator.
  j["mem"]["activations"] = r.mem.activations;
  if (r.mem.live_unit_bytes > 0 || r.mem.peak_live_bytes > 0) {
    // Stage 3 (summaries, like the flat keys above: part of compute.params, not extra).
    j["mem"]["live_units"] = r.mem.live_unit_bytes;
    j["mem"]["peak_live_units"] = r.mem.peak_live_bytes;
  }
  // Stages 1-2 on one host: the one copy of the parameters the ranks share (params counts
  // this rank's share of it).
  if (r.mem.host_shared_params > 0) j["mem"]["host_shared_params"] = r.mem.host_shared_params;
  return j.dump();
}

void StepLog::write_step(const StepRecord& record) { write_line(to_json(record)); }

void StepLog::write_eval(int64_t step, const std::map<std::string, double>& metrics) {
  nlohmann::json j;
  j["event"] = "eval";
  j["step"] = step;
  for (const auto& [k, v] : metrics) j[k] = v;
  write_line(j.dump());
}

void StepLog::write_line(const std::string& line) {
  if (file_ == nullptr) return;
  if (std::fprintf(file_, "%s\n", line.c_str()) < 0 || std::fflush(file_) != 0) {
    throw Error("--log " + path_ + ": write failed: " + std::strerror(errno));
  }
}

}  // namespace zoff::train
