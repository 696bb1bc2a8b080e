// The umbrella header compiles on its own and exposes every area (a regression test: the
// activation-checkpointing function once clashed with the zoff::checkpoint namespace).
#include <gtest/gtest.h>
#include <zoff/zoff.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "zoff_test_paths.h"

namespace {

TEST(UmbrellaHeader, ExposesEveryArea) {
  EXPECT_EQ(zoff::checkpoint::kCheckpointFormatVersion, 2);
  torch::nn::Linear lin(2, 2);
  auto x = torch::randn({3, 2}, torch::requires_grad());
  auto y = zoff::activation_checkpoint([&](const torch::Tensor& h) { return lin(h); }, x);
  y.sum().backward();
  EXPECT_TRUE(lin->weight.grad().defined());
  EXPECT_TRUE(torch::equal(zoff::unit_forward(lin, x), lin(x)));
}

// Every header under include/zoff/ (found by walking the tree, so a new area's headers count
// as soon as they exist) is included by zoff/zoff.h.
TEST(UmbrellaHeader, IncludesEveryPublicHeader) {
  namespace fs = std::filesystem;
  const fs::path include_dir = fs::path(ZOFF_SOURCE_DIR) / "include";
  std::ifstream in(include_dir / "zoff" / "zoff.h");
  std::stringstream umbrella;
  umbrella << in.rdbuf();
  int headers = 0;
  for (const auto& entry : fs::recursive_directory_iterator(include_dir / "zoff")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".h") continue;
    const std::string name = fs::relative(entry.path(), include_dir).generic_string();
    if (name == "zoff/zoff.h") continue;
    ++headers;
    EXPECT_NE(umbrella.str().find("#include \"" + name + "\""), std::string::npos)
        << "zoff/zoff.h does not include " << name;
  }
  EXPECT_GT(headers, 30);
}

}  // namespace
