// Re-saving a step that exists (a resumed run passing the step it resumed from) and saves
// killed or failing midway: `latest` always names a complete checkpoint, nothing committed is
// lost, and leftovers of killed saves are removed by the next save.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "checkpoint/checkpoint_test_support.h"
#include "zoff/checkpoint/atomic_file.h"
#include "zoff/checkpoint/checkpoint.h"
#include "zoff/checkpoint/step_directory.h"
#include "zoff/core/error.h"

namespace zoff::checkpoint::resave_test {
namespace {

namespace fs = std::filesystem;
using testing::resume_config;
using testing::run_identity;
using testing::ScratchDir;
using testing::Segment;
using testing::train_segment;

// Trains a world-2 run whose weights start from `model_seed` for 2 steps and saves step 2.
void save_step2(const std::string& root, uint64_t model_seed) {
  Segment seg{0, 2, "", root, 2};
  seg.model_seed = model_seed;
  train_segment(resume_config(1, 2), 2, seg);
}

// Every rank's error from a save that fails inside train_segment's worker threads.
std::vector<std::string> failing_save_errors(const std::string& root, const std::string& fail_at) {
  set_save_fault_hook([fail_at](int, const std::string& path) {
    if (path.find(fail_at) != std::string::npos) throw Error("injected fault at " + path);
  });
  auto errors = testing::errors_on_ranks(resume_config(1, 2), 2,
                                         [&](engine::ZeroEngine& engine, testing::TinyMlp&, int) {
                                           engine.restore_from_shards(2);
                                           save_checkpoint(engine, root, run_identity());
                                         });
  set_save_fault_hook({});
  return errors;
}

TEST(CheckpointResave, FailedResaveOfACommittedStepKeepsIt) {
  ScratchDir dir;
  save_step2(dir.path(), 1);
  const auto first = read_checkpoint_info(dir.path());
  // The re-save fails at a rank file, then at meta.json: step_2 stays the first save.
  for (const std::string fail_at : {"rank_1.bin", "meta.json"}) {
    const auto errors = failing_save_errors(dir.path(), fail_at);
    EXPECT_NE((errors[0] + errors[1]).find("injected fault"), std::string::npos)
        << fail_at << ": " << errors[0];
    EXPECT_EQ(read_text_file(dir / "latest"), "step_2\n");
    const auto now = read_checkpoint_info(dir.path());
    EXPECT_EQ(now.files[0].crc32, first.files[0].crc32) << fail_at;
    EXPECT_EQ(now.files[1].crc32, first.files[1].crc32) << fail_at;
  }
  // The committed checkpoint still loads.
  const auto resumed = train_segment(resume_config(1, 2), 2, Segment{2, 3, dir.path()});
  EXPECT_EQ(resumed.losses.size(), 1u);
}

TEST(CheckpointResave, FailureAfterTheSwapLeavesLatestValid) {
  ScratchDir dir;
  save_step2(dir.path(), 1);
  const auto first = read_checkpoint_info(dir.path());
  // Fails writing `latest`: the new step_2 is in place and the old `latest` names it.
  const auto errors = failing_save_errors(dir.path(), "latest");
  EXPECT_NE(errors[0].find("injected fault"), std::string::npos) << errors[0];
  EXPECT_EQ(resolve_checkpoint_dir(dir.path()), dir / "step_2");
  EXPECT_NE(read_checkpoint_info(dir.path()).files[0].crc32, first.files[0].crc32);
  EXPECT_FALSE(fs::exists(dir / "step_2.tmp"));  // the old step was removed after the swap
}

TEST(CheckpointResave, NextSaveRemovesLeftoversOfKilledSavesOnly) {
  ScratchDir dir;
  fs::create_directories(dir / "step_7.tmp");
  std::ofstream(dir / "step_7.tmp/rank_0.bin.tmp") << "torn";
  fs::create_directories(dir / "step_3.old.tmp");
  std::ofstream(dir / "latest.tmp") << "step_";
  // Not ours: a user's files that merely look similar stay.
  std::ofstream(dir / "notes.tmp") << "mine";
  fs::create_directories(dir / "step_x.tmp");
  save_step2(dir.path(), 1);
  EXPECT_FALSE(fs::exists(dir / "step_7.tmp"));
  EXPECT_FALSE(fs::exists(dir / "step_3.old.tmp"));
  EXPECT_FALSE(fs::exists(dir / "latest.tmp"));
  EXPECT_FALSE(fs::exists(dir / "step_2.tmp"));
  EXPECT_TRUE(fs::exists(dir / "notes.tmp"));
  EXPECT_TRUE(fs::exists(dir / "step_x.tmp"));
  EXPECT_EQ(resolve_checkpoint_dir(dir.path()), dir / "step_2");
}

TEST(CheckpointResave, SwapExchangesAnExistingDirectory) {
  ScratchDir dir;
  fs::create_directories(dir / "step_1");
  std::ofstream(dir / "step_1/old") << "old";
  fs::create_directories(dir / "step_1.tmp");
  std::ofstream(dir / "step_1.tmp/new") << "new";
  swap_in_step(dir / "step_1.tmp", dir / "step_1", dir.path());
  EXPECT_TRUE(fs::exists(dir / "step_1/new"));
  EXPECT_FALSE(fs::exists(dir / "step_1/old"));
  EXPECT_FALSE(fs::exists(dir / "step_1.tmp"));
}

}  // namespace
}  // namespace zoff::checkpoint::resave_test
