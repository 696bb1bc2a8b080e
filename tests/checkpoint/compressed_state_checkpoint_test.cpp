// Checkpoints of bf16 and int8 optimizer states: stored compressed, bit-exact resume at the
// same layout, resume at another world size and stage, and refusals of mismatched files.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_test_support.h"
#include "zoff/checkpoint/atomic_file.h"
#include "zoff/checkpoint/checkpoint.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::checkpoint::compressed_state_checkpoint_test {
namespace {

namespace fs = std::filesystem;
using testing::errors_on_ranks;
using testing::resume_config;
using testing::run_identity;
using testing::ScratchDir;
using testing::Segment;
using testing::train_segment;

constexpr int64_t kSaveAt = 4;  // steps before the checkpoint
constexpr int64_t kTotal = 8;   // steps of the whole run

config::Config compressed_config(int stage, int world, const std::string& dtype) {
  auto cfg = resume_config(stage, world);
  cfg.optimizer.state_dtype = dtype;
  return cfg;
}

struct SameLayout {
  int stage;
  int world;
  std::string dtype;
  int64_t hidden = 13;  // TinyMlp's width: 600 gives shards of several int8 blocks
};

void PrintTo(const SameLayout& c, std::ostream* os) {
  *os << "stage " << c.stage << " world " << c.world << " " << c.dtype << " hidden " << c.hidden;
}

class CompressedResumeIsBitExact : public ::testing::TestWithParam<SameLayout> {};

// Save at step k, resume in a fresh job: the next steps' losses and parameters equal the
// uninterrupted run's bit for bit (the stored codes, scales and bf16 bits are the state).
TEST_P(CompressedResumeIsBitExact, LossesAndParametersEqualTheUninterruptedRun) {
  const auto c = GetParam();
  const auto cfg = compressed_config(c.stage, c.world, c.dtype);
  ScratchDir dir;
  Segment first{0, kTotal, "", dir.path(), kSaveAt};
  first.model_hidden = c.hidden;
  const auto whole = train_segment(cfg, c.world, first);
  Segment resumed{kSaveAt, kTotal, dir.path()};
  resumed.model_seed = testing::kSeed + 1;  // other weights, all overwritten by the load
  resumed.model_hidden = c.hidden;
  const auto second = train_segment(cfg, c.world, resumed);
  ASSERT_EQ(second.losses.size(), static_cast<size_t>(kTotal - kSaveAt));
  for (size_t i = 0; i < second.losses.size(); ++i) {
    EXPECT_EQ(second.losses[i], whole.losses[kSaveAt + i]) << "step " << kSaveAt + i;
  }
  EXPECT_TRUE(torch::equal(second.params, whole.params))
      << "max diff " << (second.params - whole.params).abs().max().item<double>();
}

INSTANTIATE_TEST_SUITE_P(
    StagesWorldsDtypes, CompressedResumeIsBitExact,
    ::testing::Values(SameLayout{2, 1, "bf16"}, SameLayout{2, 3, "bf16"}, SameLayout{3, 1, "bf16"},
                      SameLayout{3, 3, "bf16"}, SameLayout{2, 1, "int8"}, SameLayout{2, 3, "int8"},
                      SameLayout{3, 1, "int8"}, SameLayout{3, 3, "int8"}, SameLayout{0, 1, "int8"},
                      SameLayout{1, 3, "int8"},
                      // Stage 0: each rank saves its slice of the
                      // whole-buffer states and gathers them back.
                      SameLayout{0, 2, "bf16"}, SameLayout{0, 3, "bf16"}, SameLayout{0, 2, "int8"},
                      SameLayout{0, 3, "int8"}, SameLayout{0, 3, "bf16", 600},
                      SameLayout{0, 2, "int8", 600}, SameLayout{0, 3, "int8", 600}));

// The nvme tier's states (codes or bf16 bits in its files, int8 scales in host memory) are
// what the checkpoint streams: resuming into the tier is bit-exact too.
TEST(CompressedCheckpoint, ResumeThroughTheNvmeTierIsBitExact) {
  const std::string tier_dir = "/var/tmp/zoff_ckpt_nvme_" + std::to_string(::getpid());
  fs::create_directories(tier_dir);
  for (const std::string dtype : {"bf16", "int8"}) {
    for (int world : {1, 3}) {
      auto cfg = compressed_config(2, world, dtype);
      cfg.zero.offload_optimizer.device = "nvme";
      cfg.zero.offload_optimizer.nvme_paths = {tier_dir};
      ScratchDir dir;
      const auto whole = train_segment(cfg, world, Segment{0, kTotal, "", dir.path(), kSaveAt});
      Segment resumed{kSaveAt, kTotal, dir.path()};
      resumed.model_seed = testing::kSeed + 1;
      const auto second = train_segment(cfg, world, resumed);
      for (size_t i = 0; i < second.losses.size(); ++i) {
        EXPECT_EQ(second.losses[i], whole.losses[kSaveAt + i]) << dtype << " world " << world;
      }
      EXPECT_TRUE(torch::equal(second.params, whole.params)) << dtype << " world " << world;
    }
  }
  fs::remove_all(tier_dir);
}

// Bytes of the optimizer-state sections of a checkpoint's rank 0 file, and their dtypes.
std::pair<uint64_t, std::vector<std::string>> state_bytes(const std::string& root) {
  const auto info = read_checkpoint_info(resolve_checkpoint_dir(root));
  uint64_t bytes = 0;
  for (size_t i = 0; i < info.state_names.size(); ++i) {
    const uint64_t elem = info.state_dtypes[i] == "F32"    ? 4
                          : info.state_dtypes[i] == "BF16" ? 2
                                                           : 1;
    const bool scales = info.state_names[i].find(".scales") != std::string::npos;
    const uint64_t n = scales ? optim::state_blocks(static_cast<size_t>(info.shard_size()))
                              : static_cast<uint64_t>(info.shard_size());
    bytes += elem * n;
  }
  return {bytes, info.state_dtypes};
}

// The rank files hold the states as stored: 8, 4 and ~2 bytes per shard element.
TEST(CompressedCheckpoint, StoresTheStatesCompressed) {
  std::map<std::string, uint64_t> file_bytes;
  for (const std::string dtype : {"fp32", "bf16", "int8"}) {
    ScratchDir dir;
    train_segment(compressed_config(2, 1, dtype), 1, Segment{0, 2, "", dir.path(), 2});
    const auto [bytes, dtypes] = state_bytes(dir.path());
    const auto info = read_checkpoint_info(resolve_checkpoint_dir(dir.path()));
    EXPECT_EQ(info.state_dtype, dtype);
    const auto n = static_cast<uint64_t>(info.shard_size());
    if (dtype == "fp32") {
      EXPECT_EQ(dtypes, (std::vector<std::string>{"F32", "F32"}));
      EXPECT_EQ(bytes, 8 * n);
    } else if (dtype == "bf16") {
      EXPECT_EQ(dtypes, (std::vector<std::string>{"BF16", "BF16"}));
      EXPECT_EQ(bytes, 4 * n);
    } else {
      EXPECT_EQ(dtypes, (std::vector<std::string>{"I8", "F32", "U8", "F32"}));
      EXPECT_EQ(bytes, 2 * (n + 4 * optim::state_blocks(n)));
    }
    file_bytes[dtype] = fs::file_size(resolve_checkpoint_dir(dir.path()) + "/rank_0.bin");
  }
  EXPECT_LT(file_bytes["bf16"], file_bytes["fp32"]);
  EXPECT_LT(file_bytes["int8"], file_bytes["bf16"]);
  std::cout << "rank_0.bin bytes: fp32 " << file_bytes["fp32"] << ", bf16 " << file_bytes["bf16"]
            << ", int8 " << file_bytes["int8"] << "\n";
}

// Saved at world 2, stage 1; loaded at another world size and stage. bf16 states map
// element by element (exact, as fp32 does); int8 states are decoded with their old blocks'
// scales and encoded in the new layout's blocks, which may move a value by a code step.
TEST(CompressedCheckpoint, ResumesAtAnotherWorldSizeAndStage) {
  // fp32's resharding tolerance (summation order over ranks and micro-batches).
  constexpr double kLossRelTol = 1e-5;
  // int8 re-encoding moves m and v by up to a code step in a few blocks; measured on the
  // tiny mlp after 4 more steps: 3.7e-5 at worst (bf16: 5e-8, the summation order).
  constexpr double kInt8ReshardLossRelTol = 2e-4;
  for (const std::string dtype : {"bf16", "int8"}) {
    ScratchDir dir;
    const auto first = compressed_config(1, 2, dtype);
    const auto whole = train_segment(first, 2, Segment{0, kTotal, "", dir.path(), kSaveAt});
    for (const auto& [stage, world] : std::vector<std::pair<int, int>>{{2, 3}, {3, 3}, {2, 1}}) {
      Segment resumed{kSaveAt, kTotal, dir.path()};
      resumed.model_seed = testing::kSeed + 1;
      const auto cfg = compressed_config(stage, world, dtype);
      const auto second = train_segment(cfg, world, resumed);
      ASSERT_EQ(second.losses.size(), static_cast<size_t>(kTotal - kSaveAt));
      const double tol = dtype == "bf16" ? kLossRelTol : kInt8ReshardLossRelTol;
      double worst = 0;
      for (size_t i = 0; i < second.losses.size(); ++i) {
        const double want = whole.losses[kSaveAt + i] / (first.gradient_accumulation_steps * 2.0);
        const double got =
            second.losses[i] / static_cast<double>(cfg.gradient_accumulation_steps * world);
        EXPECT_NEAR(got, want, tol * std::abs(want))
            << dtype << " stage " << stage << " world " << world << " step " << kSaveAt + i;
        worst = std::max(worst, std::abs(got - want) / std::abs(want));
      }
      std::printf("%s states, world 2 stage 1 -> world %d stage %d: worst loss rel diff %.3g\n",
                  dtype.c_str(), world, stage, worst);
    }
  }
}

void expect_one_line_usage(const std::vector<std::string>& errors, const std::string& needle) {
  bool named = false;
  for (size_t r = 0; r < errors.size(); ++r) {
    EXPECT_EQ(errors[r].rfind("UsageError: ", 0), 0u) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(errors[r].find('\n'), std::string::npos) << errors[r];
    named = named || errors[r].find(needle) != std::string::npos;
  }
  EXPECT_TRUE(named) << "no rank's error mentions '" << needle << "': " << errors[0];
}

std::vector<std::string> load_errors(const config::Config& cfg, int world, const std::string& dir) {
  return errors_on_ranks(cfg, world, [&](engine::ZeroEngine& engine, testing::TinyMlp&, int) {
    load_checkpoint(engine, dir, run_identity());
  });
}

// Another state dtype than the checkpoint's: converted through fp32 on resume (into fp32
// exactly; into bf16 or int8 rounded), at the same layout and at another one. The run goes
// on near the uninterrupted run that kept the checkpoint's dtype.
TEST(CompressedCheckpoint, ResumesWithAnotherStateDtype) {
  // Converting changes a state by at most an int8 code or a bf16 rounding, and the run then
  // goes on in the new dtype: measured worst relative loss difference over the 4 steps
  // after resuming, tiny mlp: 3.8e-5 (fp32 -> int8), 2.7e-6 (fp32 -> bf16).
  constexpr double kConvertLossRelTol = 2e-4;
  struct Case {
    std::string saved, resumed;
    int stage, world;
  };
  const std::vector<Case> cases = {{"int8", "fp32", 2, 2},
                                   {"int8", "bf16", 3, 3},
                                   {"fp32", "int8", 2, 2},
                                   {"bf16", "fp32", 2, 1},
                                   {"fp32", "bf16", 1, 2}};
  for (const auto& c : cases) {
    ScratchDir dir;
    const auto first = compressed_config(2, 2, c.saved);
    const auto whole = train_segment(first, 2, Segment{0, kTotal, "", dir.path(), kSaveAt});
    Segment resumed{kSaveAt, kTotal, dir.path()};
    resumed.model_seed = testing::kSeed + 1;  // the checkpoint's weights must win
    const auto cfg = compressed_config(c.stage, c.world, c.resumed);
    const auto second = train_segment(cfg, c.world, resumed);
    ASSERT_EQ(second.losses.size(), static_cast<size_t>(kTotal - kSaveAt));
    double worst = 0;
    for (size_t i = 0; i < second.losses.size(); ++i) {
      const double want = whole.losses[kSaveAt + i] / (first.gradient_accumulation_steps * 2.0);
      const double got =
          second.losses[i] / static_cast<double>(cfg.gradient_accumulation_steps * c.world);
      worst = std::max(worst, std::abs(got - want) / std::abs(want));
    }
    EXPECT_LT(worst, kConvertLossRelTol) << c.saved << " -> " << c.resumed;
    std::printf("%s states saved, resumed as %s at stage %d world %d: worst loss rel diff %.3g\n",
                c.saved.c_str(), c.resumed.c_str(), c.stage, c.world, worst);
  }
}

// CRC32 of meta.json without meta_crc32, as the checkpoint computes it.
void rewrite_meta(const std::string& path, nlohmann::ordered_json j) {
  j.erase("meta_crc32");
  const std::string text = j.dump();
  j["meta_crc32"] = static_cast<uint32_t>(
      ::crc32(0, reinterpret_cast<const Bytef*>(text.data()), static_cast<uInt>(text.size())));
  std::ofstream(path) << j.dump(2) << "\n";
}

// A section whose dtype or size is not what meta.json records (an edited meta, re-signed),
// or a truncated rank file: refused with one line naming the file and section.
TEST(CompressedCheckpointErrors, MismatchedOrTruncatedSectionIsRefused) {
  ScratchDir dir;
  const auto cfg = compressed_config(2, 2, "int8");
  train_segment(cfg, 2, Segment{0, 2, "", dir.path(), 2});
  const std::string ckpt = resolve_checkpoint_dir(dir.path());
  const std::string meta = ckpt + "/meta.json";
  const auto original = nlohmann::ordered_json::parse(read_text_file(meta));
  auto edited = original;
  edited["optimizer"]["state_dtypes"][0] = "BF16";
  rewrite_meta(meta, edited);
  expect_one_line_usage(load_errors(cfg, 2, dir.path()), "section 'optim.exp_avg' is I8 of ");
  // Int8 codes of another map (one with no name: a checkpoint of zoff before the map had one).
  EXPECT_EQ(original["optimizer"]["int8_map"], optim::kInt8MapName);
  edited = original;
  edited["optimizer"].erase("int8_map");
  rewrite_meta(meta, edited);
  expect_one_line_usage(load_errors(cfg, 2, dir.path()), "int8 optimizer states in map 'sqrt'");
  edited["optimizer"]["int8_map"] = "dynamic-tree";
  rewrite_meta(meta, edited);
  expect_one_line_usage(load_errors(cfg, 2, dir.path()), "map 'dynamic-tree'");
  rewrite_meta(meta, original);
  fs::resize_file(ckpt + "/rank_1.bin", fs::file_size(ckpt + "/rank_1.bin") - 100);
  expect_one_line_usage(load_errors(cfg, 2, dir.path()), "rank_1.bin: ");
}

// Worst relative difference of the per-sample losses after resuming `saved`'s checkpoint
// (world `saved_world`) at `cfg` on `world` ranks, against the uninterrupted saved run.
double worst_resumed_loss_diff(const config::Config& saved, int saved_world,
                               const config::Config& cfg, int world, int64_t hidden) {
  ScratchDir dir;
  Segment first{0, kTotal, "", dir.path(), kSaveAt};
  first.model_hidden = hidden;
  const auto whole = train_segment(saved, saved_world, first);
  Segment resumed{kSaveAt, kTotal, dir.path()};
  resumed.model_seed = testing::kSeed + 1;
  resumed.model_hidden = hidden;
  const auto second = train_segment(cfg, world, resumed);
  EXPECT_EQ(second.losses.size(), static_cast<size_t>(kTotal - kSaveAt));
  double worst = 0;
  for (size_t i = 0; i < second.losses.size(); ++i) {
    const double want = whole.losses[kSaveAt + i] /
                        static_cast<double>(saved.gradient_accumulation_steps * saved_world);
    const double got =
        second.losses[i] / static_cast<double>(cfg.gradient_accumulation_steps * world);
    worst = std::max(worst, std::abs(got - want) / std::abs(want));
  }
  return worst;
}

// Stage 0's per-rank slices are laid out as stage 1-3 shards (int8 blocks from each
// shard's first element), so a stage-0 checkpoint resumes at another world size and stage
// and the other way round, within ResumesAtAnotherWorldSizeAndStage's tolerances.
TEST(CompressedCheckpoint, StageZeroResumesAtAnotherLayoutAndBack) {
  constexpr double kLossRelTol = 1e-5;  // bf16: mapped exactly
  // int8: re-encoded in the new blocks, each state may move by a code step. Measured worst:
  // 9.8e-5 with the true square-root map, 3.6e-4 with bit_sqrt (hidden 600, world 2 stage 0
  // -> world 3 stage 2), whose step is up to sqrt(2) coarser below the block max.
  constexpr double kInt8ReshardLossRelTol = 1e-3;
  struct Case {
    int saved_stage, saved_world, stage, world;
  };
  for (const std::string dtype : {"bf16", "int8"}) {
    for (const auto& c : {Case{0, 2, 2, 3}, Case{2, 2, 0, 3}}) {
      for (const int64_t hidden : {13, 600}) {
        const double worst = worst_resumed_loss_diff(
            compressed_config(c.saved_stage, c.saved_world, dtype), c.saved_world,
            compressed_config(c.stage, c.world, dtype), c.world, hidden);
        EXPECT_LT(worst, dtype == "bf16" ? kLossRelTol : kInt8ReshardLossRelTol)
            << dtype << " hidden " << hidden;
        std::printf(
            "%s states, hidden %lld, world %d stage %d -> world %d stage %d: worst loss "
            "rel diff %.3g\n",
            dtype.c_str(), static_cast<long long>(hidden), c.saved_world, c.saved_stage, c.world,
            c.stage, worst);
      }
    }
  }
}

}  // namespace
}  // namespace zoff::checkpoint::compressed_state_checkpoint_test
