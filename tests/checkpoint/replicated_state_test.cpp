// A user's model with BatchNorm, a frozen embedding and a tied weight: its checkpoint,
// resume, export and load_module round-trip every parameter and buffer (stages 2 and 3).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_test_support.h"
#include "engine/user_model.h"
#include "zoff/checkpoint/checkpoint.h"
#include "zoff/checkpoint/load_module.h"
#include "zoff/checkpoint/safetensors_export.h"
#include "zoff/unit/unit_call.h"

namespace zoff::checkpoint::replicated_state_test {
namespace {

using engine::testing::UserModel;
using testing::ScratchDir;
constexpr int kWorld = 2;
constexpr int kSteps = 3;

// Every tensor the module registers by name (params and buffers), cloned in fp32; at
// stage 3 read through a gather of every unit.
std::map<std::string, torch::Tensor> snapshot(UserModel& model) {
  std::map<std::string, torch::Tensor> out;
  zoff::with_unit(*model, [&] {
    for (auto& item : model->named_parameters()) out[item.key()] = item.value().detach().clone();
    for (auto& item : model->named_buffers()) out[item.key()] = item.value().detach().clone();
    return torch::Tensor();
  });
  return out;
}

void expect_same(const std::map<std::string, torch::Tensor>& got,
                 const std::map<std::string, torch::Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, t] : want) {
    ASSERT_EQ(got.count(name), 1u) << what << ": " << name;
    EXPECT_TRUE(torch::equal(got.at(name).to(t.scalar_type()), t)) << what << ": " << name;
  }
}

CheckpointInfo identity() {
  CheckpointInfo run;
  run.model = "user-model";
  run.seed = 1;
  return run;
}

// Trains kSteps at `stage` on 2 ranks and saves; returns rank 0's tensors.
std::map<std::string, torch::Tensor> train_and_save(int stage, const std::string& dir) {
  auto cfg = engine::testing::base_config(stage, kWorld, 12, 2);
  std::vector<UserModel> models{engine::testing::make_user_model(),
                                engine::testing::make_user_model()};
  std::map<std::string, torch::Tensor> trained;
  engine::testing::run_ranks(kWorld, [&](dist::CommPtr comm, int rank) {
    auto model = models[static_cast<size_t>(rank)];
    engine::ZeroEngine engine(model.ptr(), cfg, comm);
    for (int s = 0; s < kSteps; ++s) {
      auto gen = torch::make_generator<torch::CPUGeneratorImpl>(70 + s * kWorld + rank);
      for (int k = 0; k < 2; ++k) {
        auto x = torch::randint(engine::testing::kVocab, {3}, gen);
        auto y = torch::randint(3, {3}, gen);
        engine.backward(torch::nn::functional::cross_entropy(model(x), y));
      }
      engine.step();
    }
    save_checkpoint(engine, dir, identity());
    auto mine = snapshot(model);  // collective at stage 3
    if (rank == 0) trained = mine;
  });
  return trained;
}

class ReplicatedState : public ::testing::TestWithParam<int> {};

TEST_P(ReplicatedState, ResumeRestoresBuffersFrozenAndTrainedTensors) {
  ScratchDir dir;
  const auto trained = train_and_save(GetParam(), dir.path());
  auto cfg = engine::testing::base_config(GetParam(), kWorld, 12, 2);
  // Other seeds: every restored value must come from the checkpoint.
  std::vector<UserModel> fresh{engine::testing::make_user_model(true, 99),
                               engine::testing::make_user_model(true, 98)};
  engine::testing::run_ranks(kWorld, [&](dist::CommPtr comm, int rank) {
    auto model = fresh[static_cast<size_t>(rank)];
    engine::ZeroEngine engine(model.ptr(), cfg, comm);
    load_checkpoint(engine, dir.path(), identity());
    expect_same(snapshot(model), trained, "resumed rank " + std::to_string(rank));
  });
}

TEST_P(ReplicatedState, ExportAndLoadModuleHoldEveryParameterAndBuffer) {
  ScratchDir dir;
  const auto trained = train_and_save(GetParam(), dir.path());
  // A plain module, no engine: parameters, buffers, and the tied weight under both names.
  auto plain = engine::testing::make_user_model(false, 42);
  load_module_from_checkpoint(*plain, dir.path());
  expect_same(snapshot(plain), trained, "load_module");

  const std::string out = dir / "model.safetensors";
  const auto summary = export_safetensors(dir.path(), out);
  const std::string bytes = read_text_file(out);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  const std::string data = bytes.substr(8 + n);
  std::map<std::string, torch::Tensor> exported;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const auto begin = entry.at("data_offsets")[0].get<size_t>();
    const auto end = entry.at("data_offsets")[1].get<size_t>();
    auto t = torch::empty(entry.at("shape").get<std::vector<int64_t>>(),
                          dtype_from_name(entry.at("dtype").get<std::string>()));
    ASSERT_EQ(static_cast<size_t>(t.nbytes()), end - begin) << name;
    std::memcpy(t.data_ptr(), data.data() + begin, end - begin);
    exported[name] = t;
  }
  // The tied weight is written once, under its first name; the metadata names the other.
  const auto aliases =
      nlohmann::json::parse(header.at("__metadata__").at("aliases").get<std::string>());
  EXPECT_EQ(aliases.at("dec.weight").get<std::string>(), "a.weight");
  exported["dec.weight"] = exported.at("a.weight");
  expect_same(exported, trained, "export");
  EXPECT_EQ(summary.tensors, static_cast<int64_t>(trained.size()) - 1);
}

INSTANTIATE_TEST_SUITE_P(Stages, ReplicatedState, ::testing::Values(2, 3));

}  // namespace
}  // namespace zoff::checkpoint::replicated_state_test
