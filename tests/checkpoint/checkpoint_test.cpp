// save_checkpoint / load_checkpoint: bit-exact resume at world 1-3 and stages 0-2, resume at
// another world size and stage, and
// clean failures on damaged, incomplete or mismatched checkpoints.
#include "zoff/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_test_support.h"
#include "zoff/checkpoint/atomic_file.h"
#include "zoff/checkpoint/step_directory.h"
#include "zoff/config/config_json.h"
#include "zoff/core/error.h"

namespace zoff::checkpoint::checkpoint_test {
namespace {

namespace fs = std::filesystem;
using testing::errors_on_ranks;
using testing::resume_config;
using testing::run_identity;
using testing::ScratchDir;
using testing::Segment;
using testing::train_segment;

constexpr int64_t kSaveAt = 4;  // steps before the checkpoint
constexpr int64_t kTotal = 9;   // steps of the whole run

class ResumeIsBitExact : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ResumeIsBitExact, LossesAndParametersEqualTheUninterruptedRun) {
  const auto [stage, world] = GetParam();
  const auto cfg = resume_config(stage, world);
  ScratchDir dir;
  Segment whole;
  whole.to = kTotal;
  whole.save_root = dir.path();
  whole.save_at = kSaveAt;
  const auto uninterrupted = train_segment(cfg, world, whole);

  Segment resumed;
  resumed.from = kSaveAt;
  resumed.to = kTotal;
  resumed.resume = dir.path();              // the root: found through `latest`
  resumed.model_seed = testing::kSeed + 1;  // different weights, all overwritten by the load
  const auto second = train_segment(cfg, world, resumed);

  ASSERT_EQ(second.losses.size(), static_cast<size_t>(kTotal - kSaveAt));
  for (size_t i = 0; i < second.losses.size(); ++i) {
    // Bitwise: the same fp32 operations on the same values, in the same order.
    EXPECT_EQ(second.losses[i], uninterrupted.losses[kSaveAt + i]) << "step " << kSaveAt + i;
  }
  EXPECT_TRUE(torch::equal(second.params, uninterrupted.params))
      << "max diff " << (second.params - uninterrupted.params).abs().max().item<double>();
  // And the checkpoint really mattered: a run from scratch ends elsewhere.
  EXPECT_FALSE(torch::equal(train_segment(cfg, world, Segment{0, kTotal - kSaveAt}).params,
                            uninterrupted.params));
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, ResumeIsBitExact,
                         ::testing::Combine(::testing::Values(0, 1, 2),
                                            ::testing::Values(1, 2, 3)));

// bf16 compute with the fp32 master, optimizer states and gradient shard in the cpu
// offload tier: the checkpoint holds the fp32 master, so resuming is still bit-exact.
TEST(Checkpoint, ResumeIsBitExactWithBf16ComputeAndCpuOffload) {
  for (int stage : {1, 2}) {
    auto cfg = resume_config(stage, 2);
    cfg.bf16 = true;
    cfg.zero.offload_optimizer.device = "cpu";
    ScratchDir dir;
    const auto whole = train_segment(cfg, 2, Segment{0, kTotal, "", dir.path(), kSaveAt});
    const auto resumed = train_segment(cfg, 2, Segment{kSaveAt, kTotal, dir.path()});
    ASSERT_EQ(whole.params.scalar_type(), torch::kBFloat16);
    for (size_t i = 0; i < resumed.losses.size(); ++i) {
      EXPECT_EQ(resumed.losses[i], whole.losses[kSaveAt + i]) << "stage " << stage;
    }
    EXPECT_TRUE(torch::equal(resumed.params, whole.params)) << "stage " << stage;
  }
}

TEST(Checkpoint, MetaDescribesTheRun) {
  ScratchDir dir;
  const auto cfg = resume_config(1, 2);
  train_segment(cfg, 2, Segment{0, 3, "", dir.path(), 3});
  EXPECT_EQ(read_text_file(dir / "latest"), "step_3\n");
  const auto info = read_checkpoint_info(dir.path());
  EXPECT_EQ(info.dir, dir / "step_3");
  EXPECT_EQ(info.step, 3);
  EXPECT_EQ(info.world_size, 2);
  EXPECT_EQ(info.zero_stage, 1);
  EXPECT_EQ(info.optimizer_type, "adamw");
  EXPECT_EQ(info.state_names, (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ(info.model, "tiny-mlp");
  EXPECT_EQ(info.seed, testing::kSeed);
  EXPECT_EQ(info.train_batch_size, testing::kGlobal);
  // The config the engine ran with, normalized (every key at its effective value).
  EXPECT_EQ(nlohmann::json::parse(info.config_text),
            nlohmann::json::parse(config::normalized_config_json(cfg)));
  ASSERT_EQ(info.slots.size(), 6u);  // 3 Linear layers, weight + bias each
  // Reverse registration order in the flat buffer: fc3.bias comes first.
  EXPECT_EQ(info.slots[0].name, "fc3.bias");
  EXPECT_EQ(info.numel, 8 * 13 + 13 + 13 * 7 + 7 + 7 * 4 + 4);
  EXPECT_EQ(info.padded_numel % 2, 0);
  EXPECT_EQ(info.rng_state.size(), torch_rng_state().size());
  ASSERT_EQ(info.files.size(), 2u);
  for (const auto& f : info.files) {
    const auto d = digest_file(info.dir + "/" + f.name);
    EXPECT_EQ(d.bytes, f.bytes);
    EXPECT_EQ(d.crc32, f.crc32);
  }
  // Nothing temporary is left behind.
  for (const auto& e : fs::directory_iterator(info.dir)) {
    EXPECT_EQ(e.path().extension(), e.path().filename() == "meta.json" ? ".json" : ".bin");
  }
}

TEST(Checkpoint, RestoresTheTorchRngState) {
  ScratchDir dir;
  const auto cfg = resume_config(0, 1);
  torch::manual_seed(1234);
  torch::rand({17});  // move the generator away from a fresh seed
  train_segment(cfg, 1, Segment{0, 2, "", dir.path(), 2});
  const auto after_save = torch::rand({5});
  torch::manual_seed(99);
  train_segment(cfg, 1, Segment{2, 2, dir.path()});
  EXPECT_TRUE(torch::equal(torch::rand({5}), after_save));
}

// A world-2 checkpoint at step 2 in `dir`, for the failure tests.
std::string saved_world2(const ScratchDir& dir) {
  train_segment(resume_config(1, 2), 2, Segment{0, 2, "", dir.path(), 2});
  return dir / "step_2";
}

// Loads on a fresh world-2 engine; checks that the engine kept its own weights.
std::vector<std::string> load_errors(const std::string& what, int world = 2, int stage = 1,
                                     CheckpointInfo expected = run_identity()) {
  return errors_on_ranks(resume_config(stage, world), world,
                         [&](engine::ZeroEngine& engine, testing::TinyMlp& model, int) {
                           const auto before = testing::flatten_params(*model);
                           try {
                             load_checkpoint(engine, what, expected);
                           } catch (...) {
                             EXPECT_TRUE(torch::equal(before, testing::flatten_params(*model)))
                                 << "a failed load changed the parameters";
                             EXPECT_EQ(engine.global_step(), 0);
                             throw;
                           }
                         });
}

void expect_all_fail(const std::vector<std::string>& errors, const std::string& needle) {
  bool named = false;
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_EQ(errors[r].rfind("UsageError: ", 0), 0u) << "rank " << r << ": " << errors[r];
    named = named || errors[r].find(needle) != std::string::npos;
  }
  EXPECT_TRUE(named) << "no rank's error mentions '" << needle << "': " << errors[0];
}

TEST(CheckpointErrors, CorruptByteNamesTheFile) {
  ScratchDir dir;
  const auto ckpt = saved_world2(dir);
  {
    std::fstream f(ckpt + "/rank_1.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(200);
    f.write(&c, 1);
  }
  const auto errors = load_errors(ckpt);
  expect_all_fail(errors, "rank_1.bin: corrupt (CRC32");
  EXPECT_NE(errors[0].find("failed on rank 1"), std::string::npos) << errors[0];
}

TEST(CheckpointErrors, TruncatedFile) {
  ScratchDir dir;
  const auto ckpt = saved_world2(dir);
  fs::resize_file(ckpt + "/rank_0.bin", fs::file_size(ckpt + "/rank_0.bin") - 4);
  expect_all_fail(load_errors(ckpt), "rank_0.bin: ");
  expect_all_fail(load_errors(ckpt), "(truncated)");
}

TEST(CheckpointErrors, MissingRankFile) {
  ScratchDir dir;
  const auto ckpt = saved_world2(dir);
  fs::remove(ckpt + "/rank_1.bin");
  expect_all_fail(load_errors(ckpt), "rank_1.bin: missing");
}

// Saved at world 2, stage 1; loaded at another world size and stage (the values found by
// parameter name): the losses continue the uninterrupted world-2 run's, up to the order
// of the sums over ranks and micro-batches.
TEST(Checkpoint, ResumesAtAnotherWorldSizeAndStage) {
  constexpr double kLossRelTol = 1e-5;
  ScratchDir dir;
  const auto first = resume_config(1, 2);
  const auto whole = train_segment(first, 2, Segment{0, kTotal, "", dir.path(), kSaveAt});
  // train_segment's loss sums the micro-batch means of every rank: the global mean times
  // the number of micro-batches, which depends on the layout.
  auto micro_batches = [](const config::Config& c, int world) {
    return static_cast<double>(c.gradient_accumulation_steps * world);
  };
  for (const auto& [stage, world] : std::vector<std::pair<int, int>>{{2, 3}, {0, 1}, {3, 3}}) {
    Segment resumed{kSaveAt, kTotal, dir.path()};
    resumed.model_seed = testing::kSeed + 1;  // other weights, all overwritten by the load
    const auto cfg = resume_config(stage, world);
    const auto second = train_segment(cfg, world, resumed);
    ASSERT_EQ(second.losses.size(), static_cast<size_t>(kTotal - kSaveAt));
    for (size_t i = 0; i < second.losses.size(); ++i) {
      const double want = whole.losses[kSaveAt + i] / micro_batches(first, 2);
      const double got = second.losses[i] / micro_batches(cfg, world);
      EXPECT_NEAR(got, want, kLossRelTol * std::abs(want))
          << "stage " << stage << " world " << world << " step " << kSaveAt + i;
    }
  }
}

TEST(CheckpointErrors, StageOptimizerModelAndSeedMismatch) {
  ScratchDir dir;
  const auto ckpt = saved_world2(dir);
  auto other = run_identity();
  other.model = "gpt";
  expect_all_fail(load_errors(ckpt, 2, 1, other), "is of model 'tiny-mlp', this job trains 'gpt'");
  other = run_identity();
  other.preset = "small";
  expect_all_fail(load_errors(ckpt, 2, 1, other), "preset");
  other = run_identity();
  other.seed = 5;
  expect_all_fail(load_errors(ckpt, 2, 1, other), "this job has seed 5");
  auto sgd = resume_config(1, 2);
  sgd.optimizer.type = "sgd";
  sgd.optimizer.momentum = 0.9;
  expect_all_fail(errors_on_ranks(sgd, 2,
                                  [&](engine::ZeroEngine& e, testing::TinyMlp&, int) {
                                    load_checkpoint(e, ckpt, run_identity());
                                  }),
                  "has optimizer 'adamw', this job's config has 'sgd'");
}

// A regression test: "preset" edited to "xl" made `zoff generate` build a 1.3B model first.
TEST(CheckpointErrors, EditedMetaFailsItsChecksum) {
  ScratchDir dir;
  const auto ckpt = saved_world2(dir);
  const std::string original = read_text_file(ckpt + "/meta.json");
  // A top-level field, a field nested in the config, a field added and one removed: the
  // checksum covers the whole object, not a list of fields.
  const std::vector<std::function<void(nlohmann::ordered_json&)>> edits = {
      [](nlohmann::ordered_json& m) { m["preset"] = "xl"; },
      [](nlohmann::ordered_json& m) { m["config"]["train_batch_size"] = 24; },
      [](nlohmann::ordered_json& m) { m["added_by_hand"] = true; },
      [](nlohmann::ordered_json& m) { m.erase("step"); },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    auto meta = nlohmann::ordered_json::parse(original);
    ASSERT_TRUE(meta.contains("config") && meta.contains("step"));
    edits[i](meta);
    write_file_atomically(ckpt + "/meta.json", meta.dump(2) + "\n");
    try {
      read_checkpoint_info(ckpt);
      ADD_FAILURE() << "edit " << i << ": an edited meta.json was read";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos)
          << "edit " << i << ": " << e.what();
    }
    if (i == 0) expect_all_fail(load_errors(ckpt), "checksum mismatch");
  }
}

TEST(CheckpointErrors, TrainBatchSizeMismatch) {
  ScratchDir dir;
  const auto ckpt = saved_world2(dir);
  auto cfg = engine::testing::base_config(1, 2, 2 * testing::kGlobal, testing::kAccum);
  expect_all_fail(errors_on_ranks(cfg, 2,
                                  [&](engine::ZeroEngine& engine, testing::TinyMlp&, int) {
                                    load_checkpoint(engine, ckpt, run_identity());
                                  }),
                  "was written with train_batch_size 12, this job's config has 24");
}

TEST(CheckpointErrors, LayoutMismatch) {
  ScratchDir dir;
  const auto ckpt = saved_world2(dir);
  // Same world, stage and optimizer, but a module with one more output feature.
  struct WiderImpl : torch::nn::Module {
    WiderImpl() {
      fc1 = register_module("fc1", torch::nn::Linear(8, 13));
      fc2 = register_module("fc2", torch::nn::Linear(13, 7));
      fc3 = register_module("fc3", torch::nn::Linear(7, 5));
    }
    torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
  };
  std::vector<std::shared_ptr<WiderImpl>> models{std::make_shared<WiderImpl>(),
                                                 std::make_shared<WiderImpl>()};
  std::vector<std::string> errors(2);
  engine::testing::run_ranks(2, [&](dist::CommPtr comm, int rank) {
    engine::ZeroEngine engine(models[static_cast<size_t>(rank)], resume_config(1, 2), comm);
    try {
      load_checkpoint(engine, ckpt, run_identity());
    } catch (const UsageError& e) {
      errors[static_cast<size_t>(rank)] = std::string("UsageError: ") + e.what();
    }
  });
  expect_all_fail(errors, "parameter fc3.bias is [4], this model's is [5]");
}

TEST(CheckpointErrors, MissingDirectoryOrMeta) {
  ScratchDir dir;
  EXPECT_FALSE(has_checkpoint(dir / "nothing"));
  expect_all_fail(load_errors(dir / "nothing"), "does not exist");
  expect_all_fail(load_errors(dir.path()), "no meta.json");  // empty root: no meta, no latest
  const auto ckpt = saved_world2(dir);
  fs::remove(ckpt + "/meta.json");
  expect_all_fail(load_errors(ckpt), "no meta.json");
  // `latest` still names step_2, which is no longer complete.
  expect_all_fail(load_errors(dir.path()), "latest names");
  EXPECT_FALSE(has_checkpoint(dir.path()));
}

TEST(CheckpointErrors, CorruptMetaJson) {
  ScratchDir dir;
  const auto ckpt = saved_world2(dir);
  write_file_atomically(ckpt + "/meta.json", "{\"format\": \"zoff-checkpoint\", \"step\": ");
  EXPECT_THROW(read_checkpoint_info(ckpt), UsageError);
  expect_all_fail(load_errors(ckpt), "meta.json: corrupt");
}

TEST(CheckpointCrash, IncompleteSaveIsNotACheckpointAndLatestKeepsThePreviousOne) {
  ScratchDir dir;
  const auto cfg = resume_config(2, 2);
  train_segment(cfg, 2, Segment{0, 3, "", dir.path(), 3});
  const auto good = train_segment(cfg, 2, Segment{0, 3}).params;
  // A crash while writing step 6: one rank file still under its temporary name, no meta.
  fs::create_directories(dir / "step_6");
  fs::copy_file(dir / "step_3/rank_0.bin", dir / "step_6/rank_0.bin.tmp");
  fs::resize_file(dir / "step_6/rank_0.bin.tmp", 100);
  EXPECT_EQ(resolve_checkpoint_dir(dir.path()), dir / "step_3");
  EXPECT_THROW(resolve_checkpoint_dir(dir / "step_6"), UsageError);

  // A real failure inside save: rank 1's file cannot be written.
  set_save_fault_hook([](int rank, const std::string& path) {
    if (rank == 1 && path.find("rank_1.bin") != std::string::npos) throw Error("cannot move it");
  });
  std::vector<std::string> errors(2);
  std::vector<testing::TinyMlp> models{engine::testing::make_model(1),
                                       engine::testing::make_model(1)};
  engine::testing::run_ranks(2, [&](dist::CommPtr comm, int rank) {
    engine::ZeroEngine engine(models[static_cast<size_t>(rank)].ptr(), cfg, comm);
    engine.restore_from_shards(5);
    try {
      save_checkpoint(engine, dir.path(), run_identity());
    } catch (const UsageError& e) {
      errors[static_cast<size_t>(rank)] = std::string("UsageError: ") + e.what();
    } catch (const Error& e) {
      errors[static_cast<size_t>(rank)] = std::string("Error: ") + e.what();
    }
  });
  set_save_fault_hook({});
  EXPECT_NE(errors[1].find("cannot move"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("failed on rank 1"), std::string::npos) << errors[0];
  EXPECT_FALSE(fs::exists(dir / "step_5"));
  EXPECT_FALSE(fs::exists(dir / "step_5.tmp/rank_1.bin"));
  EXPECT_EQ(read_text_file(dir / "latest"), "step_3\n");

  // Resuming from the root still works and lands on step 3's state.
  const auto resumed = train_segment(cfg, 2, Segment{3, 3, dir.path()});
  EXPECT_TRUE(torch::equal(resumed.params, good));
}

TEST(Checkpoint, SavingTheSameStepAgainReplacesIt) {
  ScratchDir dir;
  const auto cfg = resume_config(1, 2);
  train_segment(cfg, 2, Segment{0, 2, "", dir.path(), 2});
  const auto first = read_checkpoint_info(dir.path());
  // Different weights, same step: the second save must win, files and meta alike.
  Segment seg{0, 2, "", dir.path(), 2};
  seg.model_seed = 77;
  const auto second_run = train_segment(cfg, 2, seg);
  const auto second = read_checkpoint_info(dir.path());
  EXPECT_NE(first.files[0].crc32, second.files[0].crc32);
  const auto resumed = train_segment(cfg, 2, Segment{2, 2, dir.path()});
  EXPECT_TRUE(torch::equal(resumed.params, second_run.params));
}

}  // namespace
}  // namespace zoff::checkpoint::checkpoint_test
