// `zoff bench optim --tier nvme`: the sub-group step from disk vs in RAM vs the disk bound.
#include "zoff/engine/tiered_optimizer_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/core/round_up.h"
#include "zoff/engine/tiered_optimizer.h"
#include "zoff/offload/io_bench.h"
#include "zoff/offload/tier.h"
#include "zoff/optim/aligned_floats.h"
#include "zoff/optim/shard_optimizer.h"

namespace zoff::engine {
namespace {

constexpr size_t kMaxParams = size_t{1} << 31;  // 8 GiB per fp32 array, past this machine's RAM
constexpr int kMaxSteps = 1000;
constexpr int kMaxRepeats = 100;
constexpr size_t kDirectIoAlignment = 4096;  // bytes: the tier's O_DIRECT unit
// fp32 arrays of AdamW that cross the disk each way per step: master, exp_avg, exp_avg_sq.
constexpr double kArraysMoved = 3;

optim::OptimizerOptions adamw_options() {
  optim::OptimizerOptions o;
  o.type = "adamw";
  o.weight_decay = 0.01;
  return o;
}

// Deterministic O(1) params and small gradients.
void fill_inputs(float* p, float* g, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    p[i] = 0.5f + static_cast<float>(i % 1000) * 1e-3f;
    g[i] = static_cast<float>(static_cast<int>((i * 7919) % 2001) - 1000) * 1e-5f;
  }
}

double seconds_of(const std::function<void()>& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Everything the bench holds: the in-RAM optimizer and its spans, the tiered one, and the
// bandwidth probe on a file of the states' size.
struct Bench {
  const TieredBenchOptions& o;
  optim::AlignedFloats ram_master, grads;
  std::vector<uint16_t> out16;
  std::unique_ptr<optim::ShardOptimizer> ram;
  std::unique_ptr<offload::Tier> tier;
  std::unique_ptr<TieredOptimizer> nvme;
  std::unique_ptr<offload::IoBench> io;

  explicit Bench(const TieredBenchOptions& options)
      : o(options), ram_master(o.params), grads(o.params), out16(o.params) {
    fill_inputs(ram_master.data(), grads.data(), o.params);
    const auto adamw = adamw_options();
    ram = optim::make_shard_optimizer(adamw, o.params, optim::OptimizerBackend::kFused, o.threads);
    tier = offload::make_nvme_tier(o.dir, "zoff_bench_optim", o.aio);
    SubGroupOptions sub_groups;
    sub_groups.sub_group_elems = o.sub_group_elems;
    sub_groups.buffer_count = o.buffer_count;
    nvme = std::make_unique<TieredOptimizer>(*tier, adamw, o.threads, o.params, sub_groups);
    nvme->append_master(0, ram_master.data(), o.params);
    nvme->finish_master();
    offload::IoBenchOptions probe;
    probe.dir = o.dir;
    probe.aio = o.aio;
    probe.transfer_bytes = static_cast<size_t>(nvme->sub_group_elems()) * sizeof(float);
    const auto state_bytes = static_cast<size_t>(kArraysMoved * sizeof(float)) * o.params;
    probe.file_bytes = round_up(std::max(state_bytes, probe.transfer_bytes), kDirectIoAlignment);
    probe.transfer_bytes = std::min(probe.transfer_bytes, probe.file_bytes);
    io = std::make_unique<offload::IoBench>(probe);
  }

  void ram_steps() {
    const double lr = adamw_options().lr;
    for (int s = 0; s < o.steps; ++s) {
      ram->step(ram_master.data(), grads.data(), lr, optim::CopyOut::kBf16, out16.data());
    }
  }
  void nvme_steps() {
    const double lr = adamw_options().lr;
    for (int s = 0; s < o.steps; ++s) {
      nvme->step(grads.data(), lr, optim::CopyOut::kBf16, out16.data(), nullptr);
    }
  }
};

}  // namespace

void validate_tiered_bench_options(const TieredBenchOptions& o) {
  ZOFF_CHECK_ARG(o.params > 0 && o.params <= kMaxParams, "bench optim: --params = ", o.params,
                 ": must be in [1, ", kMaxParams, "]");
  ZOFF_CHECK_ARG(o.threads >= 1 && o.threads <= 256, "bench optim: --threads = ", o.threads,
                 ": must be in [1, 256]");
  ZOFF_CHECK_ARG(o.steps >= 1 && o.steps <= kMaxSteps, "bench optim: --steps = ", o.steps,
                 ": must be in [1, ", kMaxSteps, "]");
  ZOFF_CHECK_ARG(o.repeats >= 1 && o.repeats <= kMaxRepeats, "bench optim: --repeats = ", o.repeats,
                 ": must be in [1, ", kMaxRepeats, "]");
  ZOFF_CHECK_ARG(o.sub_group_elems > 0, "bench optim: --sub-group-size = ", o.sub_group_elems,
                 ": must be > 0");
  ZOFF_CHECK_ARG(o.buffer_count >= 0, "bench optim: --buffer-count = ", o.buffer_count,
                 ": must be >= 0 (0: auto)");
  offload::validate_aio_options(o.aio);
}

TieredBenchResult run_tiered_bench(const TieredBenchOptions& o) {
  validate_tiered_bench_options(o);
  Bench bench(o);
  TieredBenchResult r;
  r.options = o;
  r.io = bench.tier->io_description();
  // Warm-up: faults in the RAM optimizer's states and the host buffers, writes every block
  // of the probe's file once.
  bench.ram_steps();
  bench.nvme_steps();
  bench.io->write_pass();
  const double work = static_cast<double>(o.params) * o.steps;
  // Round robin, so a swing of this VM's bandwidth hits every figure alike.
  for (int rep = 0; rep < o.repeats; ++rep) {
    r.ram_params_per_s =
        std::max(r.ram_params_per_s, work / seconds_of([&] { bench.ram_steps(); }));
    r.nvme_params_per_s =
        std::max(r.nvme_params_per_s, work / seconds_of([&] { bench.nvme_steps(); }));
    r.write_gbps = std::max(r.write_gbps, bench.io->write_pass());
    r.read_gbps = std::max(r.read_gbps, bench.io->read_pass());
  }
  r.bytes_per_param = kArraysMoved * sizeof(float);
  const double seconds_per_param =
      r.bytes_per_param / (r.read_gbps * 1e9) + r.bytes_per_param / (r.write_gbps * 1e9);
  r.disk_bound_params_per_s = 1.0 / seconds_per_param;
  return r;
}

std::string format_tiered_bench_table(const TieredBenchResult& r, const std::string& command_line) {
  const auto& o = r.options;
  std::ostringstream os;
  char line[256];
  os << "$ " << command_line << "\n";
  std::snprintf(line, sizeof line,
                "AdamW with bf16 copy-out, %zu params, %d threads, sub-groups of %lld, best of "
                "%d x %d steps; tier %s (%s)\n\n",
                o.params, o.threads, static_cast<long long>(o.sub_group_elems), o.repeats, o.steps,
                o.dir.c_str(), r.io.c_str());
  os << line;
  std::snprintf(line, sizeof line, "%-30s %12s %12s\n", "", "Mparams/s", "nvme / this");
  os << line;
  auto row = [&](const char* name, double value) {
    std::snprintf(line, sizeof line, "%-30s %12.1f %11.2fx\n", name, value / 1e6,
                  r.nvme_params_per_s / value);
    os << line;
  };
  row("step in RAM (fused kernel)", r.ram_params_per_s);
  row("step from nvme (sub-groups)", r.nvme_params_per_s);
  row("disk bound", r.disk_bound_params_per_s);
  std::snprintf(line, sizeof line,
                "\ndisk bound: %.0f bytes read + %.0f written per param (master, exp_avg, "
                "exp_avg_sq) at the tier's measured %.2f GB/s read, %.2f GB/s write\n",
                r.bytes_per_param, r.bytes_per_param, r.read_gbps, r.write_gbps);
  os << line;
  return os.str();
}

std::string format_tiered_bench_json(const TieredBenchResult& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"params\": %zu, \"sub_group_size\": %lld, \"io\": \"%s\", \"ram_params_per_s\": "
                "%.0f, \"nvme_params_per_s\": %.0f, \"disk_bound_params_per_s\": %.0f, "
                "\"read_gbps\": %.3f, \"write_gbps\": %.3f, \"bytes_per_param\": %.0f}",
                r.options.params, static_cast<long long>(r.options.sub_group_elems), r.io.c_str(),
                r.ram_params_per_s, r.nvme_params_per_s, r.disk_bound_params_per_s, r.read_gbps,
                r.write_gbps, r.bytes_per_param);
  return buf;
}

}  // namespace zoff::engine
