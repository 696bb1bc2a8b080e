// GradReducer on its own: 16-bit gradients staged as they are (half the bytes on the wire)
// reduce into the fp32 shard bitwise equal to staging them widened to fp32, on uneven shards;
// pooled staging buffers leave no stale values behind, and there are at most two of them.
#include "zoff/engine/grad_reducer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine_test_support.h"
#include "zoff/partition/model_layout.h"

namespace zoff::engine::grad_reducer_test {
namespace {

// Odd sizes in two units, uneven shards over 3 ranks; the second unit (76) pads to 78.
constexpr int64_t kSizes[] = {37, 5, 64, 12};

// This rank's gradient of parameter i: bf16 values with all 8 mantissa bits in use, so any
// rounding of a partial sum to 16 bits would show.
torch::Tensor rank_grad(int rank, size_t i) {
  auto gen = at::detail::createCPUGenerator(1000 * static_cast<uint64_t>(rank) + i);
  return torch::randn({kSizes[i]}, gen).to(torch::kBFloat16);
}

struct Reduced {
  torch::Tensor shard;  // this rank's fp32 shard of the summed gradient
  double total = 0;     // its sum, fp64
};

// Zero bf16 parameters of kSizes in units a = {p0, p1}, b = {p2, p3}, and a stage-2 reducer
// over them with the given staging dtype and bucket size.
struct ReducerUnderTest {
  std::vector<torch::Tensor> params;
  std::unique_ptr<partition::ModelLayout> layout;
  std::unique_ptr<GradReducer> reducer;

  ReducerUnderTest(dist::CommPtr comm, torch::ScalarType staging, int64_t bucket_elems) {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (size_t i = 0; i < std::size(kSizes); ++i) {
      params.push_back(torch::zeros({kSizes[i]}, torch::kBFloat16).requires_grad_());
      named.emplace_back("p" + std::to_string(i), params.back());
    }
    layout = std::make_unique<partition::ModelLayout>(
        named, std::vector<partition::UnitSpec>{{"a", {0, 1}}, {"b", {2, 3}}}, comm->size(),
        /*shard_units=*/true);
    GradReducerOptions o;
    o.mode = GradMode::kReduceScatterEveryMicroBatch;
    o.bucket_elems = bucket_elems;
    o.staging_dtype = staging;
    reducer = std::make_unique<GradReducer>(*layout, params, comm, o);
  }

  // One backward of sum_i (p_i * g_i * scale).sum() over the parameters `which`, reduced.
  void backward(int rank, const std::vector<size_t>& which, double scale) {
    reducer->begin_backward(/*boundary=*/true);
    auto loss = torch::zeros({}, torch::kFloat32);
    for (size_t i : which) {
      loss = loss + (params[i] * (rank_grad(rank, i) * scale)).sum().to(torch::kFloat32);
    }
    loss.backward();
    reducer->end_backward();
  }
};

// One backward of sum_i (p_i * g_i).sum() on bf16 parameters (gradient g_i exactly), reduced
// with the given staging dtype and bucket size.
Reduced reduce(dist::CommPtr comm, int rank, torch::ScalarType staging, int64_t bucket_elems) {
  ReducerUnderTest setup(comm, staging, bucket_elems);
  setup.backward(rank, {0, 1, 2, 3}, 1.0);
  Reduced r;
  r.shard = setup.reducer->reduced_grads().clone();
  r.total = r.shard.sum(torch::kFloat64).item<double>();
  return r;
}

TEST(GradReducer, Bf16StagingReducesBitwiseAsFp32StagingOnUnevenShards) {
  const int world = 3;
  // Every gradient summed over ranks, the reference for the shards' total (fp64).
  double want = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < std::size(kSizes); ++i) {
      want += rank_grad(r, i).sum(torch::kFloat64).item<double>();
    }
  }
  for (int64_t bucket : {int64_t{16}, int64_t{1000}}) {  // a bucket per unit, one for both
    std::vector<double> totals(world);
    testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
      const auto fp32 = reduce(comm, rank, torch::kFloat32, bucket);
      const auto bf16 = reduce(comm, rank, torch::kBFloat16, bucket);
      EXPECT_EQ(fp32.shard.dtype(), torch::kFloat32);
      EXPECT_TRUE(torch::equal(bf16.shard, fp32.shard)) << "rank " << rank << " bucket " << bucket;
      totals[static_cast<size_t>(rank)] = bf16.total;
    });
    double got = 0;
    for (double t : totals) got += t;
    EXPECT_NEAR(got, want, 1e-4 * (1.0 + std::abs(want))) << "bucket " << bucket;
  }
}

// The summed gradient of parameter i over `world` ranks, as the Comm sums it: fp32, rank order.
torch::Tensor summed_grad(int world, size_t i) {
  auto sum = rank_grad(0, i).to(torch::kFloat32);
  for (int r = 1; r < world; ++r) sum = sum + rank_grad(r, i).to(torch::kFloat32);
  return sum;
}

// Staging buffers are pooled and only a bucket's padding is cleared when one is taken, so
// a parameter without a gradient in a backward must still reduce to zeros (and padding too)
// after an earlier backward filled the same buffers.
TEST(GradReducer, ParametersWithoutGradientReduceToZeroInReusedStaging) {
  const int world = 3;
  const std::vector<size_t> used = {0, 3};  // p1 and p2 get no gradient in the second backward
  testing::run_ranks(world, [&](dist::CommPtr comm, int rank) {
    ReducerUnderTest setup(comm, torch::kBFloat16, /*bucket_elems=*/16);  // a bucket per unit
    setup.backward(rank, {0, 1, 2, 3}, 1000.0);  // fills every staging buffer with large values
    setup.reducer->zero_grads();
    setup.backward(rank, used, 1.0);
    const auto& layout = *setup.layout;
    auto want = torch::zeros({layout.padded_numel()}, torch::kFloat32);
    for (const auto& slot : layout.slots()) {  // slots run in reverse registration order
      if (std::find(used.begin(), used.end(), slot.module_index) == used.end()) continue;
      want.narrow(0, slot.offset, slot.numel).copy_(summed_grad(world, slot.module_index));
    }
    auto got = setup.reducer->reduced_grads();
    for (const auto& unit : layout.units()) {
      EXPECT_TRUE(
          torch::equal(got.narrow(0, unit.shard_offset, unit.shard_size),
                       want.narrow(0, unit.offset + rank * unit.shard_size, unit.shard_size)))
          << "rank " << rank << " unit " << unit.name;
    }
  });
}

// With overlap, buckets fill while earlier buckets' collectives run, in two staging buffers
// exactly: a rank whose peer is late (its collectives cannot finish) stages the second
// bucket in a new buffer, then waits instead of growing the pool; the late rank, whose
// collectives end at once, allocates the same two (the count does not hang on timing, so
// the memory report is the same in every run); and the sums stay right.
TEST(GradReducer, StagingPoolHoldsTwoBucketsWhilePeersAreLate) {
  constexpr int kWorld = 2;
  constexpr int64_t kUnits = 6, kElems = 40;  // one bucket per unit: 40 elements, 20 per rank
  constexpr auto kLate = std::chrono::milliseconds(300);
  testing::run_ranks(kWorld, [&](dist::CommPtr comm, int rank) {
    std::vector<torch::Tensor> params;
    std::vector<std::pair<std::string, torch::Tensor>> named;
    std::vector<partition::UnitSpec> units;
    for (int64_t u = 0; u < kUnits; ++u) {
      params.push_back(torch::zeros({kElems}, torch::kBFloat16).requires_grad_());
      named.emplace_back("p" + std::to_string(u), params.back());
      units.push_back({"u" + std::to_string(u), {static_cast<size_t>(u)}});
    }
    const partition::ModelLayout layout(named, units, kWorld, /*shard_units=*/true);
    GradReducerOptions o;
    o.mode = GradMode::kReduceScatterEveryMicroBatch;
    o.bucket_elems = kElems;
    o.staging_dtype = torch::kBFloat16;
    GradReducer reducer(layout, params, comm, o);
    if (rank == 1) std::this_thread::sleep_for(kLate);
    reducer.begin_backward(/*boundary=*/true);
    auto loss = torch::zeros({}, torch::kFloat32);
    for (int64_t u = 0; u < kUnits; ++u) {
      loss = loss + (params[static_cast<size_t>(u)] * static_cast<double>(rank + u + 1))
                        .sum()
                        .to(torch::kFloat32);
    }
    loss.backward();
    reducer.end_backward();
    const size_t bucket_bytes = kElems * sizeof(uint16_t);
    EXPECT_EQ(reducer.buffer_bytes(), 2 * bucket_bytes) << "rank " << rank;
    // Every element of unit u sums to (u + 1) + (u + 2) over the two ranks.
    for (const auto& unit : layout.units()) {
      const int64_t u = std::stol(unit.name.substr(1));
      EXPECT_TRUE(
          torch::equal(reducer.reduced_grads().narrow(0, unit.shard_offset, unit.shard_size),
                       torch::full({unit.shard_size}, static_cast<float>(2 * u + 3))))
          << "rank " << rank << " unit " << unit.name;
    }
  });
}

// How many staging buffers a run keeps does not hang on timing: min(2, buckets), as the run
// plan's "reduce staging" counts, after every backward. A model that fits one bucket keeps
// one buffer (that bucket can be the whole model's gradients), however many backwards run.
TEST(GradReducer, StagingBuffersAreMinOfTwoAndBucketsAfterEveryBackward) {
  constexpr int kWorld = 2;
  testing::run_ranks(kWorld, [&](dist::CommPtr comm, int rank) {
    for (const int64_t bucket_elems : {int64_t{1} << 20, int64_t{16}}) {  // one; one per unit
      ReducerUnderTest setup(comm, torch::kBFloat16, bucket_elems);
      int64_t largest = 0;  // elements of the largest bucket
      for (const auto& unit : setup.layout->units()) {
        largest = std::max(largest, unit.shard_size * kWorld);
      }
      if (setup.reducer->bucket_count() == 1) largest = setup.layout->padded_numel();
      const size_t buffers = std::min<size_t>(2, setup.reducer->bucket_count());
      for (int step = 0; step < 3; ++step) {
        setup.backward(rank, {0, 1, 2, 3}, 1.0);
        setup.reducer->zero_grads();
        EXPECT_EQ(setup.reducer->buffer_bytes(),
                  buffers * static_cast<size_t>(largest) * sizeof(uint16_t))
            << "rank " << rank << ", " << setup.reducer->bucket_count() << " buckets, backward "
            << step;
      }
    }
  });
}

TEST(GradReducer, GradientOfAnotherDtypeThanTheStagingIsRefused) {
  testing::run_ranks(2, [&](dist::CommPtr comm, int rank) {
    std::vector<torch::Tensor> params{torch::zeros({6}).requires_grad_()};  // fp32 gradient
    const partition::ModelLayout layout({{"w", params[0]}}, {{"u", {0}}}, comm->size(), true);
    GradReducerOptions o;
    o.mode = GradMode::kReduceScatterEveryMicroBatch;
    o.staging_dtype = torch::kBFloat16;
    GradReducer reducer(layout, params, comm, o);
    reducer.begin_backward(true);
    try {
      (params[0] * static_cast<double>(rank + 1)).sum().backward();
      FAIL() << "an fp32 gradient went into bf16 staging";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("gradient staging expects"), std::string::npos)
          << e.what();
    }
    reducer.abort_backward();
  });
}

}  // namespace
}  // namespace zoff::engine::grad_reducer_test
