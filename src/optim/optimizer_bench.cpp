// `zoff bench optim`: params/s of the fused kernels, LibTorch's optimizers and a streaming probe.
#include "zoff/optim/optimizer_bench.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/optim/aligned_floats.h"
#include "zoff/optim/compressed_adam.h"
#include "zoff/optim/kernels.h"
#include "zoff/optim/openmp_probe.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/optim/simd_dispatch.h"
#include "zoff/optim/split_master.h"
#include "zoff/optim/thread_pool.h"

namespace zoff::optim {
namespace {

// Largest span the bench allocates: 2^31 floats is 8 GiB per span, past this machine's RAM.
constexpr size_t kMaxBenchParams = size_t{1} << 31;
constexpr int kMaxSteps = 1000;
constexpr int kMaxRepeats = 100;

// Bytes each kernel moves per parameter (for the GB/s column).
constexpr double kAdamBytes = 28;      // read p g m v, write p m v
constexpr double kAdamBf16Bytes = 30;  // + 2-byte copy
constexpr double kSgdBytes = 20;       // read p g buf, write p buf
constexpr double kAdagradBytes = 20;   // read p g sum, write p sum
// Compressed states, with the 2-byte bf16 copy-out: bf16 m, v are 2 bytes each way
// (read p g m v 12, write p m v 8); int8 m, v 1 byte each way (read 10, write 6) plus each
// state's fp32 block scale read and written once per 2048 elements (4 x 4 / 2048).
constexpr double kAdamBf16StatesBytes = 20 + 2;
constexpr double kAdamInt8StatesBytes = 16 + 2 + 16.0 / 2048;
// The split master (split_master.h) instead of the fp32 master and the bf16 copy-out: the
// copy and the extension read and written (2 + 2 each way) where the master was (4 each
// way) and the copy written (2): 2 bytes less per parameter than the same states with the
// copy-out.
constexpr double kAdamSplitMasterBytes = kAdamBf16Bytes - 2;
constexpr double kAdamInt8SplitMasterBytes = kAdamInt8StatesBytes - 2;

// Bytes moved per parameter by each zoff kernel of the table (by name).
double kernel_bytes(const std::string& kernel) {
  if (kernel == "adamw" || kernel == "adam") return kAdamBytes;
  if (kernel == "adamw_bf16_out") return kAdamBf16Bytes;
  if (kernel == "adamw_bf16_states") return kAdamBf16StatesBytes;
  if (kernel == "adamw_int8_states") return kAdamInt8StatesBytes;
  if (kernel == "adamw_split_master") return kAdamSplitMasterBytes;
  if (kernel == "adamw_int8_split_master") return kAdamInt8SplitMasterBytes;
  if (kernel == "sgd") return kSgdBytes;
  return kAdagradBytes;
}

// One thing being timed: `step` moves the whole span once.
struct Contestant {
  std::map<std::string, double>* table;
  std::string name;
  std::function<void()> step;
  double best = 0;  // params/s
};

// Times every contestant `repeats` times, round robin (so a burst of load from other
// processes hits all of them alike), each time `steps` calls after one warm-up call (which
// also faults in lazily allocated pages). The best repetition counts.
void measure_round_robin(const OptimizerBenchOptions& o, std::vector<Contestant>& contestants) {
  for (auto& c : contestants) c.step();
  for (int r = 0; r < o.repeats; ++r) {
    for (auto& c : contestants) {
      const auto start = std::chrono::steady_clock::now();
      for (int s = 0; s < o.steps; ++s) c.step();
      const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
      c.best = std::max(c.best, static_cast<double>(o.params) * o.steps / seconds.count());
    }
  }
  for (const auto& c : contestants) (*c.table)[c.name] = c.best;
}

// Deterministic O(1) params and small gradients, written by the pool (first touch).
void fill_inputs(ThreadPool& pool, float* p, float* g, size_t n) {
  const auto bounds = split_on_cache_lines(n, pool.size(), 0, 1);
  pool.run([&](int k) {
    for (size_t i = bounds[static_cast<size_t>(k)]; i < bounds[static_cast<size_t>(k) + 1]; ++i) {
      p[i] = 0.5f + static_cast<float>(i % 1000) * 1e-3f;
      g[i] = static_cast<float>(static_cast<int>((i * 7919) % 2001) - 1000) * 1e-5f;
    }
  });
}

// `type` is an optimizer type, or adamw_<dtype>_states: AdamW storing its states as <dtype>.
OptimizerOptions bench_options(const std::string& type) {
  OptimizerOptions o;
  o.type = type;
  if (type.rfind("adamw_", 0) == 0) {
    o.type = "adamw";
    o.state_dtype = type.substr(6, 4);  // "bf16" | "int8"
  }
  o.weight_decay = 0.01;
  if (type == "sgd") {
    o.lr = 1e-2;
    o.momentum = 0.9;
  }
  return o;
}

// A step of a ShardOptimizer of `type` over the whole span.
std::function<void()> optimizer_step(ShardOptimizer& opt, const std::string& type, CopyOut copy_out,
                                     float* p, const float* g, uint16_t* out16) {
  const double lr = bench_options(type).lr;
  return [&opt, lr, copy_out, p, g, out16] { opt.step(p, g, lr, copy_out, out16); };
}

// A step of the split master (ShardOptimizer::step_split) over the whole span. The two
// split-master contestants step the same halves in turn: any valid master will do.
std::function<void()> split_step(ShardOptimizer& opt, uint16_t* copy, uint16_t* ext,
                                 const float* g) {
  const double lr = bench_options("adamw").lr;
  return [&opt, copy, ext, g, lr] { opt.step_split(copy, ext, g, lr); };
}

// A pass over the whole span by the pool, split like the fused optimizers split it (on p's
// cache lines): `piece(begin, count)` for each thread's non-empty piece.
using Piece = std::function<void(size_t begin, size_t count)>;
std::function<void()> pooled_pass(const OptimizerBenchOptions& o, ThreadPool& pool, const float* p,
                                  Piece piece) {
  const auto bounds = split_on_cache_lines(o.params, pool.size(), first_cache_line_index(p), 1);
  return [&pool, bounds, piece = std::move(piece)] {
    pool.run([&](int k) {
      const size_t b = bounds[static_cast<size_t>(k)];
      const size_t e = bounds[static_cast<size_t>(k) + 1];
      if (e > b) piece(b, e - b);
    });
  };
}

// A pass of the streaming probe (stream_probe) over the whole span.
std::function<void()> probe_step(const OptimizerBenchOptions& o, ThreadPool& pool, float* p,
                                 const float* g, float* m, float* v, uint16_t* out16) {
  return pooled_pass(o, pool, p, [=](size_t b, size_t n) {
    stream_probe(p + b, g + b, m + b, v + b, n, out16 ? out16 + b : nullptr);
  });
}

// A pass of the compressed states' streaming probe (stream_probe_states), with m and v sized
// here for `dtype`.
std::function<void()> probe_states_step(const OptimizerBenchOptions& o, ThreadPool& pool,
                                        StateDtype dtype, float* p, const float* g,
                                        std::vector<uint8_t>& m, std::vector<uint8_t>& v,
                                        uint16_t* out16) {
  const size_t bytes = stored_element_bytes(dtype);
  m.assign(o.params * bytes, 0);
  v.assign(o.params * bytes, 1);
  return pooled_pass(o, pool, p, [=, md = m.data(), vd = v.data()](size_t b, size_t n) {
    stream_probe_states(dtype, p + b, g + b, md + b * bytes, vd + b * bytes, n, out16 + b);
  });
}

// Phase 1: zoff's fused kernels and the streaming probes, interleaved (their ratio is the
// point); then adamw and adam each by itself, and the OpenMP probe by itself, so that the two
// are compared on equal terms (OptimizerBenchResult::alone). The OpenMP probe comes last:
// libgomp's idle threads spin for milliseconds after a parallel region (OMP_WAIT_POLICY
// unset) and would halve the speed of whatever zoff kernel ran next.
void measure_fused(const OptimizerBenchOptions& o, ThreadPool& pool, float* pd, const float* gd,
                   OptimizerBenchResult& result) {
  std::map<std::string, std::unique_ptr<ShardOptimizer>> fused;
  for (const char* type : {"adamw", "adam", "sgd", "adagrad", "adamw_bf16_states",
                           "adamw_int8_states", "adamw_split", "adamw_int8_split"}) {
    const std::string options = std::string(type).substr(0, std::string(type).rfind("_split"));
    fused[type] =
        make_shard_optimizer(bench_options(options), o.params, OptimizerBackend::kFused, o.threads);
  }
  // The split master's halves, from the same values (settled), written once.
  std::vector<uint16_t> copy16(o.params), ext16(o.params);
  {
    std::vector<float> master(pd, pd + o.params);
    split_master_encode(master.data(), o.params, copy16.data(), ext16.data());
  }
  std::vector<uint16_t> out16(o.params);
  AlignedFloats m(o.params), v(o.params);  // the probe's own scratch state
  fill_inputs(pool, m.data(), v.data(), o.params);
  std::vector<uint8_t> m16, v16, m8, v8;  // the compressed probes' states, as bytes
  std::vector<Contestant> phase;
  auto add = [&](std::map<std::string, double>& table, const char* name,
                 std::function<void()> step) {
    phase.push_back({&table, name, step});
  };
  add(result.zoff, "adamw",
      optimizer_step(*fused["adamw"], "adamw", CopyOut::kNone, pd, gd, nullptr));
  add(result.probe, "adam_fp32", probe_step(o, pool, pd, gd, m.data(), v.data(), nullptr));
  add(result.zoff, "adamw_bf16_out",
      optimizer_step(*fused["adamw"], "adamw", CopyOut::kBf16, pd, gd, out16.data()));
  add(result.probe, "adam_bf16_out", probe_step(o, pool, pd, gd, m.data(), v.data(), out16.data()));
  for (const char* type : {"adamw_bf16_states", "adamw_int8_states"}) {
    add(result.zoff, type,
        optimizer_step(*fused[type], type, CopyOut::kBf16, pd, gd, out16.data()));
  }
  add(result.zoff, "adamw_split_master",
      split_step(*fused["adamw_split"], copy16.data(), ext16.data(), gd));
  add(result.zoff, "adamw_int8_split_master",
      split_step(*fused["adamw_int8_split"], copy16.data(), ext16.data(), gd));
  add(result.probe, "adam_bf16_states",
      probe_states_step(o, pool, StateDtype::kBf16, pd, gd, m16, v16, out16.data()));
  add(result.probe, "adam_int8_states",
      probe_states_step(o, pool, StateDtype::kInt8, pd, gd, m8, v8, out16.data()));
  for (const char* type : {"adam", "sgd", "adagrad"}) {
    add(result.zoff, type, optimizer_step(*fused[type], type, CopyOut::kNone, pd, gd, nullptr));
  }
  measure_round_robin(o, phase);
  for (const char* type : {"adamw", "adam"}) {
    std::vector<Contestant> one{
        {&result.alone, type, optimizer_step(*fused[type], type, CopyOut::kNone, pd, gd, nullptr)}};
    measure_round_robin(o, one);
  }
  std::vector<Contestant> omp{{&result.probe, "adam_fp32_omp", [&o, pd, gd, &m, &v] {
                                 openmp_stream_probe(pd, gd, m.data(), v.data(), o.params,
                                                     o.threads);
                               }}};
  measure_round_robin(o, omp);
}

// Phase 2: LibTorch's optimizers on the same spans, with o.threads intra-op threads.
void measure_libtorch(const OptimizerBenchOptions& o, float* pd, const float* gd,
                      OptimizerBenchResult& result) {
  const int torch_threads_before = torch::get_num_threads();
  torch::set_num_threads(o.threads);
  std::map<std::string, std::unique_ptr<ShardOptimizer>> reference;
  std::vector<Contestant> phase;
  for (const char* type : {"adamw", "adam", "sgd", "adagrad"}) {
    reference[type] =
        make_shard_optimizer(bench_options(type), o.params, OptimizerBackend::kTorch, o.threads);
    phase.push_back({&result.torch, type,
                     optimizer_step(*reference[type], type, CopyOut::kNone, pd, gd, nullptr)});
  }
  measure_round_robin(o, phase);
  torch::set_num_threads(torch_threads_before);
}

// A row of the table: a zoff kernel, its LibTorch counterpart and its probe (nullptr: none),
// and whether it is compared with the OpenMP probe (fp32 states, no copy-out) too.
struct TableRow {
  const char* kernel;
  const char* torch;
  const char* probe;
  bool omp;
};
// Each kernel compares with the probe of its own traffic: zoff/probe is how near it runs to
// the memory bound of the bytes it moves.
constexpr TableRow kTableRows[] = {{"adamw", "adamw", "adam_fp32", true},
                                   {"adamw_bf16_out", nullptr, "adam_bf16_out", false},
                                   {"adamw_bf16_states", nullptr, "adam_bf16_states", false},
                                   {"adamw_int8_states", nullptr, "adam_int8_states", false},
                                   {"adamw_split_master", nullptr, "adam_fp32", false},
                                   {"adamw_int8_split_master", nullptr, nullptr, false},
                                   {"adam", "adam", "adam_fp32", true},
                                   {"sgd", "sgd", nullptr, false},
                                   {"adagrad", "adagrad", nullptr, false}};

// "rate ratio" columns (G params/s, "x") of a zoff rate against another, or "-" "-".
std::pair<std::string, std::string> rate_and_ratio(double zoff, const double* other) {
  if (other == nullptr) return {"-", "-"};
  char rate[32], ratio[32];
  std::snprintf(rate, sizeof rate, "%.3f", *other / 1e9);
  std::snprintf(ratio, sizeof ratio, "%.2fx", zoff / *other);
  return {rate, ratio};
}

std::string table_row(const OptimizerBenchResult& r, const TableRow& row) {
  const double z = r.zoff.at(row.kernel);
  const double* torch = row.torch != nullptr ? &r.torch.at(row.torch) : nullptr;
  const double* probe = row.probe != nullptr ? &r.probe.at(row.probe) : nullptr;
  const double* omp = row.omp ? &r.probe.at("adam_fp32_omp") : nullptr;
  const auto [torch_col, ratio_torch] = rate_and_ratio(z, torch);
  const auto [probe_col, ratio_probe] = rate_and_ratio(z, probe);
  // alone/omp: the kernel measured by itself, as the OpenMP probe was.
  const auto [omp_col, ratio_omp] = rate_and_ratio(row.omp ? r.alone.at(row.kernel) : 0.0, omp);
  const double bytes = kernel_bytes(row.kernel);
  char line[256];
  std::snprintf(line, sizeof line, "%-23s %12.3f %7.2f %8.1f %12s %11s %14s %12s %11s %11s %9s\n",
                row.kernel, z / 1e9, bytes, z * bytes / 1e9, torch_col.c_str(), ratio_torch.c_str(),
                row.probe ? row.probe : "-", probe_col.c_str(), ratio_probe.c_str(),
                omp_col.c_str(), ratio_omp.c_str());
  return line;
}

}  // namespace

void validate_bench_options(const OptimizerBenchOptions& o) {
  ZOFF_CHECK_ARG(o.params > 0 && o.params <= kMaxBenchParams, "bench optim: --params = ", o.params,
                 ": must be in [1, ", kMaxBenchParams, "]");
  ZOFF_CHECK_ARG(o.threads >= 1 && o.threads <= ThreadPool::kMaxThreads,
                 "bench optim: --threads = ", o.threads, ": must be in [1, ",
                 ThreadPool::kMaxThreads, "]");
  ZOFF_CHECK_ARG(o.steps >= 1 && o.steps <= kMaxSteps, "bench optim: --steps = ", o.steps,
                 ": must be in [1, ", kMaxSteps, "]");
  ZOFF_CHECK_ARG(o.repeats >= 1 && o.repeats <= kMaxRepeats, "bench optim: --repeats = ", o.repeats,
                 ": must be in [1, ", kMaxRepeats, "]");
}

OptimizerBenchResult run_optimizer_bench(const OptimizerBenchOptions& o) {
  validate_bench_options(o);
  OptimizerBenchResult result;
  result.options = o;
  result.simd_target = active_simd_target();

  ThreadPool pool(o.threads);
  AlignedFloats p(o.params), g(o.params);
  fill_inputs(pool, p.data(), g.data(), o.params);
  measure_fused(o, pool, p.data(), g.data(), result);
  fill_inputs(pool, p.data(), g.data(), o.params);  // the probe scribbled on p
  measure_libtorch(o, p.data(), g.data(), result);
  return result;
}

std::string format_bench_table(const OptimizerBenchResult& r, const std::string& command_line) {
  std::ostringstream os;
  char line[256];
  os << "$ " << command_line << "\n";
  std::snprintf(line, sizeof line,
                "fused kernels: %s; %zu params, %d threads, best of %d x %d steps\n\n",
                r.simd_target.c_str(), r.options.params, r.options.threads, r.options.repeats,
                r.options.steps);
  os << line;
  std::snprintf(line, sizeof line, "%-23s %12s %7s %8s %12s %11s %14s %12s %11s %11s %9s\n",
                "kernel", "zoff Gpar/s", "B/par", "GB/s", "torch Gpar/s", "zoff/torch", "probe",
                "probe Gpar/s", "zoff/probe", "omp Gpar/s", "alone/omp");
  os << line;
  for (const auto& row : kTableRows) os << table_row(r, row);
  // The compressed states against the fp32 states, both with the bf16 copy-out.
  const double fp32 = r.zoff.at("adamw_bf16_out");
  std::snprintf(line, sizeof line,
                "\nstates vs fp32 states (AdamW, bf16 copy-out, same run): bf16 %.2fx, int8 "
                "%.2fx\n",
                r.zoff.at("adamw_bf16_states") / fp32, r.zoff.at("adamw_int8_states") / fp32);
  os << line;
  std::snprintf(line, sizeof line,
                "split master vs fp32 master (AdamW, bf16 copy, same run): fp32 states %.2fx, "
                "int8 states %.2fx\n",
                r.zoff.at("adamw_split_master") / fp32,
                r.zoff.at("adamw_int8_split_master") / r.zoff.at("adamw_int8_states"));
  os << line;
  // The most those ratios could be in this run: each state dtype's probe (its bytes moved at
  // the memory's speed, no arithmetic) against the fp32 kernel as it ran.
  std::snprintf(line, sizeof line,
                "  ceiling (the states' probe vs the fp32 kernel, same run): bf16 %.2fx, int8 "
                "%.2fx\n",
                r.probe.at("adam_bf16_states") / fp32, r.probe.at("adam_int8_states") / fp32);
  os << line;
  os << "alone/omp: zoff's kernel and the OpenMP probe, each measured by itself (zoff alone:";
  for (const auto& [name, rate] : r.alone) {
    std::snprintf(line, sizeof line, " %s %.3f", name.c_str(), rate / 1e9);
    os << line;
  }
  os << " G params/s); in the round robin above each kernel's first step of a repetition "
        "finds its data evicted by the others'.\n";
  return os.str();
}

std::string format_bench_json(const OptimizerBenchResult& r) {
  auto object = [](const std::map<std::string, double>& values) {
    std::string s = "{";
    for (const auto& [name, value] : values) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s\"%s\": %.0f", s.size() > 1 ? ", " : "", name.c_str(),
                    value);
      s += buf;
    }
    return s + "}";
  };
  std::string bytes = "{";
  for (const auto& [name, value] : r.zoff) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "%s\"%s\": %.4f", bytes.size() > 1 ? ", " : "", name.c_str(),
                  kernel_bytes(name));
    bytes += buf;
  }
  return "{\"zoff\": " + object(r.zoff) + ", \"torch\": " + object(r.torch) +
         ", \"probe\": " + object(r.probe) + ", \"alone\": " + object(r.alone) +
         ", \"bytes_per_param\": " + bytes + "}}";
}

}  // namespace zoff::optim
