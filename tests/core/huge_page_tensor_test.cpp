// empty_on_huge_pages: large tensors on 2 MiB-aligned mappings of their own that hold what
// is written to them, small ones from torch::empty, and a clean error off the CPU.
#include "zoff/core/huge_page_tensor.h"

#include <gtest/gtest.h>

#include <cstdint>

#include "zoff/core/error.h"
#include "zoff/core/huge_pages.h"

namespace zoff::huge_page_tensor_test {
namespace {

TEST(HugePageTensor, LargeTensorsStartOnA2MiBBoundaryAndHoldTheirValues) {
  // 3 MiB of bf16 (not a multiple of 2 MiB: the last partial block keeps 4 KiB pages).
  const auto t = empty_on_huge_pages({3, 1 << 19}, torch::kBFloat16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kHugePageBytes, 0u);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{3, 1 << 19}));
  EXPECT_EQ(t.scalar_type(), torch::kBFloat16);
  const auto values = torch::randn({3, 1 << 19}).to(torch::kBFloat16);
  t.copy_(values);
  EXPECT_TRUE(torch::equal(t, values));
  // The storage outlives a view of it after the first handle is gone.
  torch::Tensor view;
  {
    auto held = empty_on_huge_pages({1 << 20}, torch::kFloat32);  // 4 MiB
    held.fill_(2.5f);
    view = held.narrow(0, 10, 5);
  }
  EXPECT_TRUE(torch::equal(view, torch::full({5}, 2.5f)));
}

TEST(HugePageTensor, SmallTensorsComeFromTheUsualAllocator) {
  const auto t = empty_on_huge_pages({1000}, torch::kFloat32);
  EXPECT_EQ(t.numel(), 1000);
  t.fill_(1.0f);
  EXPECT_EQ(t.sum().item<float>(), 1000.0f);
}

TEST(HugePageTensor, AnotherDeviceIsRefused) {
  try {
    empty_on_huge_pages({1 << 20}, torch::TensorOptions().device(torch::kCUDA));
    ADD_FAILURE() << "a CUDA tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zoff::huge_page_tensor_test
