// What a library user meets at the engine's door: a module on another device is refused in
// one line, and the config's warnings (a misspelt key) are printed, not dropped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "engine/engine_test_support.h"
#include "zoff/config/config.h"
#include "zoff/core/error.h"
#include "zoff/dist/single_comm.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::engine::engine_boundary_test {
namespace {

config::Config config_from(const std::string& text) { return config::parse_config(text, 1); }

const char* const kConfig = R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
                                "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";

// A module whose parameter lives on the meta device: a device zoff does not compute on.
struct OffCpuModule : torch::nn::Module {
  OffCpuModule() { register_parameter("w", torch::zeros({4}, torch::device(torch::kMeta))); }
};

TEST(EngineBoundary, ModuleOnADeviceZoffDoesNotComputeOnIsRefusedInOneLine) {
  auto model = std::make_shared<OffCpuModule>();
  try {
    ZeroEngine engine(model, config_from(kConfig), std::make_shared<dist::SingleComm>());
    FAIL() << "a module on the meta device was accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the module is on meta"), std::string::npos) << what;
    EXPECT_NE(what.find("the CPU or a CUDA GPU"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// A regression test: "zero_optimisation" silently ran stage 0 when zoff was used as a library.
TEST(EngineBoundary, ConfigWarningsArePrinted) {
  auto cfg = config_from(R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
                             "zero_optimisation": {"stage": 2},
                             "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})");
  ::testing::internal::CaptureStderr();
  ZeroEngine engine(testing::make_model(1).ptr(), cfg, std::make_shared<dist::SingleComm>());
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("zoff: warning: config: unknown key 'zero_optimisation'"), std::string::npos)
      << err;
}

}  // namespace
}  // namespace zoff::engine::engine_boundary_test
