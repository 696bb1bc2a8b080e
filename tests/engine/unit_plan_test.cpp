// plan_units: the default unit partition, given unit modules (a wrap policy), tied weights.
#include "zoff/engine/unit_plan.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::engine::unit_plan_test {
namespace {

// A decoder shaped like a Hugging Face causal LM: the blocks sit two levels down
// (model.layers.<i>), beside an embedding and a final norm, a head at the top, and a
// parameter registered on an intermediate module (model.scale).
struct Block : torch::nn::Module {
  Block() {
    attn = register_module("attn", torch::nn::Linear(4, 4));
    mlp = register_module("mlp", torch::nn::Linear(4, 4));
  }
  torch::nn::Linear attn{nullptr}, mlp{nullptr};
};

struct Decoder : torch::nn::Module {
  Decoder() {
    embed = register_module("embed", torch::nn::Embedding(10, 4));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) layers->push_back(std::make_shared<Block>());
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})));
    scale = register_parameter("scale", torch::ones({1}));
  }
  torch::nn::Embedding embed{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::Tensor scale;
};

// An output projection; tied: it registers the embedding's weight tensor itself.
struct Head : torch::nn::Module {
  explicit Head(torch::Tensor w) { weight = register_parameter("weight", std::move(w)); }
  torch::Tensor weight;
};

struct CausalLm : torch::nn::Module {
  explicit CausalLm(bool tie) {
    model = register_module("model", std::make_shared<Decoder>());
    head = register_module(
        "head", std::make_shared<Head>(tie ? model->embed->weight : torch::randn({10, 4})));
  }
  std::shared_ptr<Decoder> model;
  std::shared_ptr<Head> head;
};

std::vector<std::string> unit_names(const UnitPlan& plan) {
  std::vector<std::string> out;
  for (const auto& u : plan.units) out.push_back(u.name);
  return out;
}

std::shared_ptr<CausalLm> make_lm(bool tie) { return std::make_shared<CausalLm>(tie); }

std::vector<const torch::nn::Module*> blocks_of(CausalLm& lm) {
  std::vector<const torch::nn::Module*> out;
  for (const auto& b : *lm.model->layers) out.push_back(b.get());
  return out;
}

size_t params_in(const UnitPlan& plan) {
  size_t n = 0;
  for (const auto& u : plan.units) n += u.params.size();
  return n;
}

TEST(UnitPlan, DefaultMakesOneUnitPerTopLevelChild) {
  auto lm = make_lm(/*tie=*/false);
  auto plan = plan_units(*lm);
  EXPECT_EQ(unit_names(plan), (std::vector<std::string>{"model", "head"}));
  EXPECT_EQ(params_in(plan), plan.trainable.size());
}

TEST(UnitPlan, GivenBlocksAreUnitsAndTheRestGroupsByLargestSubtreeOrOwner) {
  auto lm = make_lm(/*tie=*/false);
  auto units = blocks_of(*lm);
  units.push_back(lm->model->embed.get());
  units.push_back(lm->model->norm.get());
  units.push_back(lm->head.get());
  auto plan = plan_units(*lm, units);
  // Tree order; model.scale is registered on model itself: a unit of its own.
  EXPECT_EQ(unit_names(plan),
            (std::vector<std::string>{"model.embed", "model.layers.0", "model.layers.1",
                                      "model.layers.2", "model.norm", "head", "model"}));
  EXPECT_EQ(params_in(plan), plan.trainable.size());
  EXPECT_EQ(plan.units[1].params.size(), 4u);  // attn and mlp, weight and bias each
  // A block's module reads exactly its own unit.
  EXPECT_EQ(plan.module_units.at(units[0]), std::vector<size_t>{1});
}

TEST(UnitPlan, GivenUnitsThatShareATiedWeightMerge) {
  auto lm = make_lm(/*tie=*/true);
  auto units = blocks_of(*lm);
  units.push_back(lm->model->embed.get());
  units.push_back(lm->head.get());
  auto plan = plan_units(*lm, units);
  auto names = unit_names(plan);
  // The head holds only the tied weight: it reads the embedding's unit, no unit of its own.
  EXPECT_EQ(plan.module_units.at(lm->head.get()), plan.module_units.at(lm->model->embed.get()));
  EXPECT_EQ(std::find(names.begin(), names.end(), "head"), names.end());
  EXPECT_EQ(plan.aliases.size(), 1u);
  EXPECT_EQ(params_in(plan), plan.trainable.size());
  // The norm is in no unit module and holds parameters: it lands in a unit of its own
  // module (owner grouping), so nothing is left out.
  EXPECT_NE(std::find(names.begin(), names.end(), "model.norm"), names.end());
}

void expect_refused(CausalLm& lm, const std::vector<const torch::nn::Module*>& units,
                    const std::string& says) {
  try {
    plan_units(lm, units);
    FAIL() << "accepted; expected an error saying " << says;
  } catch (const zoff::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(UnitPlan, BadUnitModulesAreRefusedNamingThem) {
  auto lm = make_lm(/*tie=*/false);
  auto other = make_lm(/*tie=*/false);
  expect_refused(*lm, {lm->model.get(), lm->model->layers[0].get()},
                 "is inside unit module model;");
  expect_refused(*lm, {lm->head.get(), lm->head.get()}, "head is listed 2 times");
  expect_refused(*lm, {other->head.get()}, "1 of the 1 listed are not part of the model");
  expect_refused(*lm, {lm.get()}, "the root module");
}

}  // namespace
}  // namespace zoff::engine::unit_plan_test
