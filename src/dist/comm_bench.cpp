// `zoff bench comm`: Gloo and shared memory timed on the same collectives, beside a memcpy probe.
#include "zoff/dist/comm_bench.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "zoff/core/error.h"
#include "zoff/dist/shm_comm.h"

namespace zoff::dist {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double ms_of(const std::function<void()>& fn) {
  const auto start = Clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One collective on one communicator, started together on every rank.
double timed_call(Comm& comm, const std::function<WorkPtr(Comm&)>& issue) {
  comm.barrier();
  return ms_of([&] { issue(comm)->wait(); });
}

}  // namespace

void validate_comm_bench_options(const CommBenchOptions& options) {
  ZOFF_CHECK_ARG(options.numel >= 1 && options.numel <= (int64_t{1} << 31), "bench comm: --numel ",
                 options.numel, ": must be in [1, 2^31]");
  ZOFF_CHECK_ARG(options.repeats >= 1, "bench comm: --repeats ", options.repeats, ": must be >= 1");
}

CommBenchResult run_comm_bench(const WorldInfo& world, const CommBenchOptions& options) {
  validate_comm_bench_options(options);
  ZOFF_CHECK_ARG(world.world_size >= 2,
                 "bench comm: needs 2 or more ranks on one host: run it under zoff launch -n 2");
  ZOFF_CHECK_ARG(world.local_world_size == world.world_size,
                 "bench comm: LOCAL_WORLD_SIZE=", world.local_world_size,
                 " of WORLD_SIZE=", world.world_size,
                 ": shared memory needs every rank on one host");
  CommPtr gloo = init_comm(world, options.timeout, {Transport::kGloo});
  std::string why_not;
  CommPtr shm = ShmComm::connect(gloo, options.timeout, ShmComm::kDefaultSlotBytes, &why_not);
  ZOFF_CHECK(shm != nullptr, "bench comm: no shared memory: ", why_not);
  const int size = world.world_size;
  const int64_t n = options.numel;
  auto shard = torch::randn({n}).to(torch::kBFloat16);
  auto whole = torch::empty({size * n}, torch::kBFloat16);
  auto grads = torch::randn({size * n}).to(torch::kBFloat16);
  auto reduced = torch::empty({n});
  const std::map<std::string, std::function<WorkPtr(Comm&)>> ops = {
      {"all_gather", [&](Comm& c) { return c.all_gather(shard, whole); }},
      {"reduce_scatter", [&](Comm& c) { return c.reduce_scatter_sum(grads, reduced); }},
  };
  CommBenchResult result;
  result.options = options;
  result.world_size = size;
  auto copy = torch::empty_like(whole);
  for (const auto& [name, issue] : ops) {
    std::vector<double> over_gloo, over_shm, copies;
    timed_call(*gloo, issue);  // warm-up: first-touch pages, Gloo's pairs
    timed_call(*shm, issue);
    for (int r = 0; r < options.repeats; ++r) {
      over_gloo.push_back(timed_call(*gloo, issue));
      over_shm.push_back(timed_call(*shm, issue));
      copies.push_back(
          ms_of([&] { std::memcpy(copy.data_ptr(), whole.data_ptr(), whole.nbytes()); }));
    }
    result.rows.push_back({name, median(over_gloo), median(over_shm), median(copies),
                           static_cast<int64_t>(shard.nbytes())});
  }
  shm->barrier();
  return result;
}

std::string format_comm_bench_table(const CommBenchResult& result,
                                    const std::string& command_line) {
  std::string out = "$ " + command_line + "\n";
  char line[256];
  std::snprintf(
      line, sizeof(line), "%d ranks, %lld elements per rank (bf16), median of %d calls, rank 0\n",
      result.world_size, static_cast<long long>(result.options.numel), result.options.repeats);
  out += line;
  out += "op               MB/rank   gloo ms    shm ms  memcpy ms  shm/gloo speedup  shm/memcpy\n";
  for (const auto& row : result.rows) {
    std::snprintf(line, sizeof(line), "%-15s %8.1f %9.2f %9.2f %10.2f %17.2fx %10.2fx\n",
                  row.op.c_str(), static_cast<double>(row.bytes_per_rank) / 1e6, row.gloo_ms,
                  row.shm_ms, row.memcpy_ms, row.gloo_ms / row.shm_ms, row.shm_ms / row.memcpy_ms);
    out += line;
  }
  out +=
      "memcpy: one thread copying the all-gather's whole output once (the floor for moving "
      "those bytes)\n";
  return out;
}

std::string format_comm_bench_json(const CommBenchResult& result) {
  std::string out = "{\"world_size\": " + std::to_string(result.world_size) +
                    ", \"numel\": " + std::to_string(result.options.numel) + ", \"ops\": {";
  for (size_t i = 0; i < result.rows.size(); ++i) {
    const auto& row = result.rows[i];
    char text[256];
    std::snprintf(text, sizeof(text),
                  "%s\"%s\": {\"gloo_ms\": %.4f, \"shm_ms\": %.4f, \"memcpy_ms\": %.4f, "
                  "\"bytes_per_rank\": %lld}",
                  i ? ", " : "", row.op.c_str(), row.gloo_ms, row.shm_ms, row.memcpy_ms,
                  static_cast<long long>(row.bytes_per_rank));
    out += text;
  }
  return out + "}}";
}

}  // namespace zoff::dist
