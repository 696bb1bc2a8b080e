// Google Benchmark: one thread's throughput of the fused Adam kernels over spans that stay in
// L2 (64K elements), where arithmetic, not memory, bounds them: fp32 states, bf16 states and
// int8 states, each with the bf16 copy-out. `zoff bench optim` gives the threaded figures.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "zoff/optim/compressed_adam.h"
#include "zoff/optim/kernels.h"
#include "zoff/optim/shard_optimizer.h"
#include "zoff/optim/state_dtype.h"

namespace {

using namespace zoff::optim;

constexpr size_t kElems = 64 * 1024;  // 16 B/element of p, g: 1 MiB, inside L2

struct Span {
  std::vector<float> p, g;
  std::vector<uint16_t> out;
  explicit Span(size_t n) : p(n), g(n), out(n) {
    for (size_t i = 0; i < n; ++i) {
      p[i] = 0.5f + static_cast<float>(i % 1000) * 1e-3f;
      g[i] = static_cast<float>(static_cast<int>((i * 7919) % 2001) - 1000) * 1e-5f;
    }
  }
};

AdamCoefficients coefficients() {
  OptimizerOptions o;
  o.type = "adamw";
  o.weight_decay = 0.01;
  return adam_coefficients(o, 1e-3, 10);
}

void BM_AdamFp32States(benchmark::State& state) {
  Span s(kElems);
  std::vector<float> m(kElems, 1e-4f), v(kElems, 1e-8f);
  const auto c = coefficients();
  for (auto _ : state) {
    fused_adam(c, s.p.data(), s.g.data(), m.data(), v.data(), kElems, CopyOut::kBf16, s.out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kElems));
}

void BM_AdamBf16States(benchmark::State& state) {
  Span s(kElems);
  std::vector<uint16_t> m(kElems, float_to_bf16(1e-4f)), v(kElems, float_to_bf16(1e-8f));
  const auto c = coefficients();
  for (auto _ : state) {
    fused_adam_bf16_states(c, s.p.data(), s.g.data(), m.data(), v.data(), kElems, CopyOut::kBf16,
                           s.out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kElems));
}

void BM_AdamInt8States(benchmark::State& state) {
  Span s(kElems);
  std::vector<int8_t> m(kElems, 0);
  std::vector<uint8_t> v(kElems, 0);
  std::vector<float> ms(state_blocks(kElems), 0.0f), vs(state_blocks(kElems), 0.0f);
  const Int8AdamStates st{m.data(), ms.data(), v.data(), vs.data()};
  const auto c = coefficients();
  for (auto _ : state) {
    fused_adam_int8_states(c, s.p.data(), s.g.data(), st, kElems, CopyOut::kBf16, s.out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kElems));
}

BENCHMARK(BM_AdamFp32States);
BENCHMARK(BM_AdamBf16States);
BENCHMARK(BM_AdamInt8States);

}  // namespace

BENCHMARK_MAIN();
