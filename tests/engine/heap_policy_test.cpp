// heap_policy.h: freed blocks kept resident for the next step, in glibc's heap and, above its
// largest threshold, in zoff's CPU allocator during training.
#include "zoff/core/heap_policy.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine_test_support.h"
#include "zoff/core/error.h"
#include "zoff/core/large_block_cache.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::heap_policy_test {
namespace {

constexpr size_t kBlockBytes = 16UL << 20;  // an activation's size: above glibc's 128 KiB

// Whether every page of [begin, begin + bytes) is mapped and resident (mincore; an unmapped
// page makes it fail with ENOMEM). VmRSS is no use here: the kernel sums it lazily.
bool resident(uintptr_t begin, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes) / page * page;
  std::vector<unsigned char> pages((last - first) / page);
  if (mincore(reinterpret_cast<void*>(first), last - first, pages.data()) != 0) return false;
  for (const unsigned char p : pages) {
    if ((p & 1) == 0) return false;
  }
  return true;
}

// In a fresh child process: allocates, touches and frees one block, and exits 0 when its
// pages after the free are as `kept` says (still resident, or handed back).
void free_block_and_check(bool kept) {
  void* block = std::malloc(kBlockBytes);
  if (block == nullptr) std::exit(2);
  std::memset(block, 1, kBlockBytes);
  const auto address = reinterpret_cast<uintptr_t>(block);  // only its pages are looked at
  if (!resident(address, kBlockBytes)) std::exit(3);
  std::free(block);
  std::exit(resident(address, kBlockBytes) == kept ? 0 : 1);
}

TEST(HeapPolicy, KeepForReuseLeavesAFreedBlockResident) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        keep_freed_memory_for_reuse();
        free_block_and_check(/*kept=*/true);
      },
      testing::ExitedWithCode(0), "");
}

// glibc's own policy maps a block this large by itself and unmaps it when freed: what the
// policy above changes (and what makes its check able to fail).
TEST(HeapPolicy, WithoutItALargeFreedBlockLeavesAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(free_block_and_check(/*kept=*/false), testing::ExitedWithCode(0), "");
}

TEST(HeapPolicy, SizesOutOfRangeAreRefusedNamingThem) {
  try {
    keep_freed_memory_for_reuse(0);
    FAIL() << "a 0-byte threshold was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("0 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(keep_freed_memory_for_reuse(32UL << 20, 4UL << 30), UsageError);
}

// A hidden layer of kLargeRows x kLargeWidth fp32: 40 MiB per activation, above glibc's
// largest mmap threshold, so without the large-block cache every step maps it afresh.
constexpr int64_t kLargeRows = 2560, kLargeWidth = 4096;

struct WideImpl : torch::nn::Module {
  WideImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(16, kLargeWidth));
    fc2 = register_module("fc2", torch::nn::Linear(kLargeWidth, 4));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::gelu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Wide);

struct WideRun {
  std::vector<float> losses;
  std::vector<LargeBlockCacheStats> after_step;
};

// Three steps at stage 2; `keep_large_blocks` false turns the cache off after the engine
// set its policy (what the RSS-first policy does).
WideRun train_wide(bool keep_large_blocks) {
  torch::manual_seed(3);
  Wide model;
  WideRun run;
  engine::testing::run_ranks(1, [&](dist::CommPtr comm, int) {
    engine::ZeroEngine engine(model.ptr(), engine::testing::base_config(2, 1, kLargeRows, 1), comm);
    if (!keep_large_blocks) {
      keep_freed_memory_for_reuse(kHeapReuseMmapBytes, kHeapReuseTrimBytes, false);
    }
    auto gen = torch::make_generator<torch::CPUGeneratorImpl>(7);
    for (int s = 0; s < 3; ++s) {
      const auto x = torch::randn({kLargeRows, 16}, gen);
      const auto loss = model(x).square().mean();
      engine.backward(loss);
      engine.step();
      run.losses.push_back(loss.item<float>());
      run.after_step.push_back(large_block_cache().stats());
    }
  });
  return run;
}

TEST(HeapPolicy, TrainingMapsNoLargeActivationAfreshAfterTheFirstStep) {
  const WideRun cached = train_wide(true);
  ASSERT_EQ(cached.after_step.size(), 3u);
  const LargeBlockCacheStats &second = cached.after_step[1], &third = cached.after_step[2];
  EXPECT_GT(cached.after_step[0].mapped, 0) << "no 40 MiB activation reached the cache";
  EXPECT_EQ(third.mapped, second.mapped) << "step 3 mapped large blocks afresh";
  // Each step allocates at least the hidden layer before and after GELU and their gradients.
  EXPECT_GE(third.reused - second.reused, 3);
  EXPECT_LE(third.live_bytes + third.cached_bytes, third.peak_live_bytes);

  // Reused blocks hold the last step's bytes, not zeros: the numbers must not notice.
  const WideRun fresh = train_wide(false);
  EXPECT_EQ(fresh.after_step[2].mapped, fresh.after_step[0].mapped) << "disabled, yet it mapped";
  EXPECT_EQ(fresh.losses, cached.losses);
}

}  // namespace
}  // namespace zoff::heap_policy_test
