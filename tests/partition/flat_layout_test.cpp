// Tests of FlatLayout (packing, shards) and FlatBuffer (views, parameter adoption).
#include "zoff/partition/flat_layout.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "partition/partition_test_support.h"
#include "zoff/core/error.h"
#include "zoff/partition/flat_buffer.h"

namespace zoff::partition::flat_layout_test {
namespace {

using testing::make_params;

TEST(FlatLayout, PacksInReverseOrderAndPadsToWorldSize) {
  auto params = make_params({5, 3, 7});  // 15 elements
  FlatLayout layout(params, 4);
  ASSERT_EQ(layout.slots().size(), 3u);
  EXPECT_EQ(layout.slots()[0].name, "p2");
  EXPECT_EQ(layout.slots()[0].offset, 0);
  EXPECT_EQ(layout.slots()[1].name, "p1");
  EXPECT_EQ(layout.slots()[1].offset, 7);
  EXPECT_EQ(layout.slots()[2].offset, 10);
  EXPECT_EQ(layout.numel(), 15);
  EXPECT_EQ(layout.padded_numel(), 16);
  EXPECT_EQ(layout.shard(3).offset, 12);
  EXPECT_EQ(layout.shard(3).size, 4);
}

TEST(FlatLayout, RejectsBadSizes) {
  auto params = make_params({3});
  EXPECT_THROW(FlatLayout(params, 0), UsageError);
  EXPECT_THROW(FlatLayout({}, 2), UsageError);
}

TEST(FlatBuffer, AdoptedParametersAreViewsAndKeepValues) {
  torch::manual_seed(0);
  auto linear = torch::nn::Linear(4, 3);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> before;
  for (auto& kv : linear->named_parameters()) {
    named.emplace_back(kv.key(), kv.value());
    params.push_back(kv.value());
    before.push_back(kv.value().detach().clone());
  }
  FlatLayout layout(named, 2);
  FlatBuffer buffer(layout, torch::kFloat32, torch::kCPU);
  buffer.adopt_parameters(params);
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], before[i]));
  buffer.flat().fill_(2.0f);
  auto out = linear(torch::ones({1, 4}));
  // 4 inputs * weight 2 + bias 2 = 10 for every output.
  EXPECT_TRUE(torch::allclose(out, torch::full({1, 3}, 10.0f)));

  FlatBuffer grads(layout, torch::kFloat32, torch::kCPU);
  grads.bind_as_grads(params);
  linear(torch::ones({1, 4})).sum().backward();
  // d(sum)/d(bias) = 1 per output: lands in the gradient buffer in place.
  EXPECT_FLOAT_EQ(grads.flat().sum().item<float>(), 3.0f * 4.0f + 3.0f);
}

}  // namespace
}  // namespace zoff::partition::flat_layout_test
