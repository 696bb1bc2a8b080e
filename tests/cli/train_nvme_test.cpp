// `zoff train` with the NVMe tier: bitwise the cpu-offload run, resumable, and faults that
// stop every rank with one line while the last checkpoint stays valid.
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::train_nvme_test {
namespace {

constexpr int64_t kSteps = 10;
constexpr uint64_t kSeed = 7;
// Elements per sub-group: gpt tiny's ~1.04M-element shard streams in ~10 sub-groups.
constexpr int64_t kSubGroup = 100000;

// gpt tiny, bf16, the given stage, optimizer states in `device` (nvme under `nvme_dir`;
// `split`: the split master, the default, else the 4-byte master that computes exactly
// what the cpu tier computes).
nlohmann::json tiny_config(int stage, const std::string& device, const std::string& nvme_dir,
                           bool split = false) {
  nlohmann::json c = example_config("gpt_tiny_stage2.json");
  c["bf16"] = {{"enabled", true}};
  c["zero_optimization"]["stage"] = stage;
  c["zero_optimization"]["offload_optimizer"] = {{"device", device}};
  if (device == "nvme") {
    c["zero_optimization"]["offload_optimizer"]["nvme_path"] = nvme_dir;
    if (!split) c["zero_optimization"]["offload_optimizer"]["split_master"] = false;
    c["zero_optimization"]["sub_group_size"] = kSubGroup;
  }
  if (stage == 3) c["zero_optimization"]["stage3_param_persistence_threshold"] = 0;
  return c;
}

TrainJob tiny_job(const TempDir& dir, const std::string& tag, const nlohmann::json& config,
                  int world) {
  TrainJob job;
  job.model = "gpt";
  job.preset = "tiny";
  job.config_path = dir.file(tag + ".json");
  write_text(job.config_path, config.dump(2));
  job.steps = kSteps;
  job.seed = kSeed;
  job.world = world;
  job.log_path = dir.file(tag + ".jsonl");
  job.save_model_path = dir.file(tag + ".pt");
  return job;
}

void expect_same_run(const TrainJob& a, const TrainJob& b) {
  const auto la = read_step_log(a.log_path);
  const auto lb = read_step_log(b.log_path);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i]["loss"].get<double>(), lb[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(la[i]["grad_norm"].get<double>(), lb[i]["grad_norm"].get<double>()) << i + 1;
  }
  const auto pa = load_model_archive(a.save_model_path);
  const auto pb = load_model_archive(b.save_model_path);
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& [name, t] : pa) EXPECT_TRUE(torch::equal(t, pb.at(name))) << name;
}

// (stage, world, parameter pieces on disk too)
class TrainNvme : public ::testing::TestWithParam<std::tuple<int, int, bool>> {};

// Same kernels on the same values in the same order: losses, gradient norms and final
// parameters equal the cpu-offload run's bit for bit; the log shows the states on disk.
TEST_P(TrainNvme, IsBitwiseTheCpuOffloadRun) {
  const auto [stage, world, params] = GetParam();
  TempDir dir;
  const std::string nvme = dir.file("nvme");
  std::filesystem::create_directories(nvme);
  const auto cpu = tiny_job(dir, "cpu", tiny_config(stage, "cpu", ""), world);
  auto r = run_train(cpu);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto config = tiny_config(stage, "nvme", nvme);
  if (params)
    config["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", nvme}};
  const auto disk = tiny_job(dir, "nvme", config, world);
  r = run_train(disk);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("nvme tier: "), std::string::npos) << r.out;
  expect_same_run(cpu, disk);
  const auto last = read_step_log(disk.log_path).back()["mem"];
  const auto before = read_step_log(cpu.log_path).back()["mem"];
  // The master and both Adam states left host memory for the disk.
  EXPECT_EQ(last["offload"]["master"].get<int64_t>(), 0);
  EXPECT_EQ(last["offload"]["optim"].get<int64_t>(), 0);
  EXPECT_EQ(last["nvme"]["master"].get<int64_t>(), before["offload"]["master"].get<int64_t>());
  EXPECT_EQ(last["nvme"]["optim"].get<int64_t>(), before["offload"]["optim"].get<int64_t>());
  if (params) {  // this rank's bf16 pieces are on disk, not in memory
    EXPECT_GT(last["nvme"]["params"].get<int64_t>(), 0);
    EXPECT_LT(last["compute"]["params"].get<int64_t>(), before["compute"]["params"].get<int64_t>());
  }
  EXPECT_TRUE(std::filesystem::is_empty(nvme)) << "tier files left behind";
}

INSTANTIATE_TEST_SUITE_P(StagesAndWorlds, TrainNvme,
                         ::testing::Values(std::make_tuple(2, 1, false),
                                           std::make_tuple(2, 2, false),
                                           std::make_tuple(3, 2, false),
                                           std::make_tuple(3, 2, true)),
                         [](const auto& info) {
                           return "Stage" + std::to_string(std::get<0>(info.param)) + "World" +
                                  std::to_string(std::get<1>(info.param)) +
                                  (std::get<2>(info.param) ? "Params" : "");
                         });

// (stage, world, state dtype, parameter pieces on disk too)
class TrainSplitMaster : public ::testing::TestWithParam<std::tuple<int, int, std::string, bool>> {
};

// The split master against the 4-byte master, both on disk: its settled odd ties (one ulp,
// ~1 element in 2^17 per step) change a compute copy only when a later rounding falls
// between the two masters, so losses agree to kSplitLossRelTol (in practice exactly) and
// the master's file is half as large.
TEST_P(TrainSplitMaster, MatchesTheFourByteMasterWithHalfTheMasterBytes) {
  constexpr double kSplitLossRelTol = 1e-4;
  const auto [stage, world, states, params] = GetParam();
  TempDir dir;
  const std::string nvme = dir.file("nvme");
  std::filesystem::create_directories(nvme);
  std::vector<TrainJob> jobs;
  for (bool split : {false, true}) {
    auto config = tiny_config(stage, "nvme", nvme, split);
    config["optimizer"]["state_dtype"] = states;
    if (params)
      config["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", nvme}};
    config["train_batch_size"] = 16 * world;  // one micro-batch of 16 per rank
    jobs.push_back(tiny_job(dir, split ? "split" : "full", config, world));
    const auto r = run_train(jobs.back());
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.out.find("master (split)") != std::string::npos, split) << r.out;
    EXPECT_EQ(r.out.find("split master: ") != std::string::npos, split) << r.out;
  }
  const auto full = read_step_log(jobs[0].log_path);
  const auto split = read_step_log(jobs[1].log_path);
  ASSERT_EQ(full.size(), split.size());
  for (size_t i = 0; i < full.size(); ++i) {
    const double want = full[i]["loss"].get<double>();
    EXPECT_NEAR(split[i]["loss"].get<double>(), want, kSplitLossRelTol * want) << i + 1;
  }
  EXPECT_EQ(split.back()["mem"]["nvme"]["master"].get<int64_t>() * 2,
            full.back()["mem"]["nvme"]["master"].get<int64_t>());
  EXPECT_TRUE(std::filesystem::is_empty(nvme)) << "tier files left behind";
}

INSTANTIATE_TEST_SUITE_P(StagesWorldsStates, TrainSplitMaster,
                         ::testing::Values(std::make_tuple(2, 1, "fp32", false),
                                           std::make_tuple(3, 3, "int8", true)),
                         [](const auto& info) {
                           return "Stage" + std::to_string(std::get<0>(info.param)) + "World" +
                                  std::to_string(std::get<1>(info.param)) +
                                  std::get<2>(info.param) +
                                  (std::get<3>(info.param) ? "Params" : "");
                         });

// Everything on disk at stage 3 with streamed gradients: a long step says how far it got
// (units through forward and backward, sub-groups, I/O wait) while it runs, and the step
// log's phase times include the waits for the disk.
TEST(TrainNvmeProgress, ALongStepReportsUnitsSubGroupsAndIoWaitWhileItRuns) {
  TempDir dir;
  const std::string nvme = dir.file("nvme");
  std::filesystem::create_directories(nvme);
  auto config = tiny_config(3, "nvme", nvme, /*split=*/true);
  config["gradient_clipping"] = 0.0;
  config["train_batch_size"] = 16;  // one micro-batch: the gradients can stream
  config["wall_clock_breakdown"] = true;
  config["zero_optimization"]["offload_optimizer"]["gradients"] = "stream";
  config["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", nvme}};
  auto job = tiny_job(dir, "progress", config, 1);
  job.steps = 3;
  job.save_model_path = "";
  job.extra = {"--step-progress", "0.02"};  // a gpt tiny step takes ~0.3 s here
  const auto r = run_train(job);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("step 1/3, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" units, backward "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" sub-groups, I/O wait "), std::string::npos) << r.err;
  const auto rows = read_step_log(job.log_path);
  ASSERT_EQ(rows.size(), 3u);
  for (const auto& row : rows) {
    const auto& t = row.at("times_ms");
    const auto ms = [&](const char* key) { return t.at(key).get<double>(); };
    EXPECT_GT(ms("io_wait_params") + ms("io_wait_optimizer"), 0.0) << t.dump();
    // The compute thread's waits are parts of its forward and backward.
    EXPECT_LE(ms("io_wait_params") + ms("io_wait_grad_window"), ms("forward") + ms("backward"))
        << t.dump();
  }
  EXPECT_NE((r.out + r.err).find("| I/O wait "), std::string::npos) << describe(r);
}

// Everything on disk at stage 3 (optimizer states, parameter pieces and the gradient
// shard): losses and final parameters equal the cpu-offload run's bit for bit (no
// clipping: the norm is summed bucket by bucket there, so it may differ in the last bits).
TEST(TrainNvmeGradients, StageThreeWithEverythingOnDiskIsBitwiseTheCpuOffloadRun) {
  constexpr double kNormRelTol = 1e-5;  // the same squares summed in another order
  TempDir dir;
  const std::string nvme = dir.file("nvme");
  std::filesystem::create_directories(nvme);
  auto base = tiny_config(3, "cpu", "");
  base["gradient_clipping"] = 0.0;
  const auto cpu = tiny_job(dir, "cpu", base, 2);
  auto r = run_train(cpu);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto config = tiny_config(3, "nvme", nvme);
  config["gradient_clipping"] = 0.0;
  config["zero_optimization"]["offload_optimizer"]["gradients"] = "nvme";
  config["zero_optimization"]["offload_param"] = {{"device", "nvme"}, {"nvme_path", nvme}};
  const auto disk = tiny_job(dir, "nvme", config, 2);
  r = run_train(disk);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto la = read_step_log(cpu.log_path);
  const auto lb = read_step_log(disk.log_path);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i]["loss"].get<double>(), lb[i]["loss"].get<double>()) << "step " << i + 1;
    const double norm = la[i]["grad_norm"].get<double>();
    EXPECT_NEAR(lb[i]["grad_norm"].get<double>(), norm, kNormRelTol * norm) << "step " << i + 1;
  }
  const auto pa = load_model_archive(cpu.save_model_path);
  const auto pb = load_model_archive(disk.save_model_path);
  for (const auto& [name, t] : pa) EXPECT_TRUE(torch::equal(t, pb.at(name))) << name;
  const auto mem = lb.back()["mem"];
  EXPECT_EQ(mem["offload"]["grads"].get<int64_t>(), 0) << mem.dump();
  EXPECT_EQ(mem["nvme"]["grads"].get<int64_t>(),
            la.back()["mem"]["offload"]["grads"].get<int64_t>())
      << "the fp32 gradient shard moved to disk whole";
  EXPECT_TRUE(std::filesystem::is_empty(nvme)) << "tier files left behind";
}

// `config` on 2 ranks resumed at step 5 of 10 from a checkpoint: the uninterrupted run's last
// five losses and final parameters, bit for bit.
void expect_resume_is_bitwise(const TempDir& dir, const nlohmann::json& config) {
  const auto whole = tiny_job(dir, "whole", config, 2);
  auto r = run_train(whole);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto first = tiny_job(dir, "first", config, 2);
  first.steps = 5;
  first.save_model_path = "";
  first.extra = {"--save", dir.file("ckpt"), "--save-every", "5"};
  r = run_train(first);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto second = tiny_job(dir, "second", config, 2);
  second.extra = {"--resume", dir.file("ckpt")};
  r = run_train(second);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto a = read_step_log(whole.log_path);
  const auto b = read_step_log(second.log_path);
  ASSERT_EQ(b.size(), 5u);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i]["loss"].get<double>(), a[5 + i]["loss"].get<double>()) << "step " << 6 + i;
  }
  const auto pa = load_model_archive(whole.save_model_path);
  const auto pb = load_model_archive(second.save_model_path);
  for (const auto& [name, t] : pa) EXPECT_TRUE(torch::equal(t, pb.at(name))) << name;
}

// A checkpoint streams the states out of the tier and back in (the split master joined
// into fp32 and split again).
TEST(TrainNvmeCheckpoint, ResumeIsBitwiseTheUninterruptedRun) {
  TempDir dir;
  const std::string nvme = dir.file("nvme");
  std::filesystem::create_directories(nvme);
  expect_resume_is_bitwise(dir, tiny_config(2, "nvme", nvme, /*split=*/true));
}

// (stage, world, state dtype)
class TrainSplitMasterInMemory
    : public ::testing::TestWithParam<std::tuple<int, int, std::string>> {};

// The split master in host memory (offload_optimizer cpu, split_master true) steps the
// values the split master on disk steps: losses, gradient norms and final parameters bit
// for bit, with half the 4-byte master's bytes in memory. World 2 at stages 1-2 keeps the
// copy half in the pieces of the one copy of the parameters per host.
TEST_P(TrainSplitMasterInMemory, IsBitwiseTheSplitMasterOnDisk) {
  const auto [stage, world, states] = GetParam();
  TempDir dir;
  const std::string nvme = dir.file("nvme");
  std::filesystem::create_directories(nvme);
  auto disk_config = tiny_config(stage, "nvme", nvme, /*split=*/true);
  auto full_config = tiny_config(stage, "cpu", "");
  auto split_config = full_config;
  split_config["zero_optimization"]["offload_optimizer"]["split_master"] = true;
  std::vector<TrainJob> jobs;
  for (auto* c : {&disk_config, &full_config, &split_config}) {
    (*c)["optimizer"]["state_dtype"] = states;
    (*c)["train_batch_size"] = 16 * world;  // one micro-batch of 16 per rank
    jobs.push_back(tiny_job(dir, "run" + std::to_string(jobs.size()), *c, world));
    const auto r = run_train(jobs.back());
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.out.find("master (split)") != std::string::npos, c != &full_config) << r.out;
  }
  expect_same_run(jobs[0], jobs[2]);
  const auto full = read_step_log(jobs[1].log_path).back()["mem"];
  const auto split = read_step_log(jobs[2].log_path).back()["mem"];
  EXPECT_EQ(split["offload"]["master"].get<int64_t>() * 2,
            full["offload"]["master"].get<int64_t>());
}

INSTANTIATE_TEST_SUITE_P(StagesWorldsStates, TrainSplitMasterInMemory,
                         ::testing::Values(std::make_tuple(1, 2, "fp32"),
                                           std::make_tuple(2, 1, "bf16"),
                                           std::make_tuple(3, 3, "int8")),
                         [](const auto& info) {
                           return "Stage" + std::to_string(std::get<0>(info.param)) + "World" +
                                  std::to_string(std::get<1>(info.param)) + std::get<2>(info.param);
                         });

// Its checkpoint: the master's section joined as read and split as written, the copy half
// in the host's one copy of the parameters.
TEST(TrainSplitMasterInMemoryCheckpoint, ResumeIsBitwiseTheUninterruptedRun) {
  TempDir dir;
  auto config = tiny_config(2, "cpu", "");
  config["zero_optimization"]["offload_optimizer"]["split_master"] = true;
  expect_resume_is_bitwise(dir, config);
}

// Where it cannot apply, asking for it is one line naming the key and what it needs.
TEST(TrainSplitMasterInMemoryRefusal, WhereItCannotApplyIsOneLineAndExit2) {
  TempDir dir;
  auto config = tiny_config(2, "cpu", "");
  config["zero_optimization"]["offload_optimizer"]["split_master"] = true;
  config["zero_optimization"]["offload_optimizer"]["delayed_param_update"] = {{"enabled", true}};
  auto r = run_train(tiny_job(dir, "delayed", config, 1));
  expect_one_line_refusal(r, {"split_master = true needs delayed_param_update = false"});
  config = tiny_config(2, "cpu", "");
  config["zero_optimization"]["offload_optimizer"]["split_master"] = true;
  config["bf16"] = {{"enabled", false}};
  r = run_train(tiny_job(dir, "fp32", config, 1));
  expect_one_line_refusal(r, {"split_master = true needs bf16"});
}

// An injected EIO in the middle of step 4's write-back: every rank stops with one line
// naming the tier file and the errno, and the checkpoint of step 2 still resumes.
TEST(TrainNvmeFaults, EioMidRunStopsEveryRankAndKeepsTheLastCheckpoint) {
  TempDir dir;
  const std::string nvme = dir.file("nvme");
  std::filesystem::create_directories(nvme);
  const auto config = tiny_config(2, "nvme", nvme);
  auto probe = tiny_job(dir, "probe", config, 1);
  probe.steps = 1;
  auto r = run_train(probe);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  // Bytes written per step: the master and two states; at start: the master.
  const int64_t master = read_step_log(probe.log_path).back()["mem"]["nvme"]["master"];
  const int64_t after = master + 3 * (3 * master) + master;  // inside step 4's writes
  auto job = tiny_job(dir, "fault", config, 2);
  job.extra = {"--save", dir.file("ckpt"), "--save-every", "2"};
  // Each rank holds half the shard: its writes reach `after` at about the same point.
  r = run_zoff(train_args(job), {"ZOFF_IO_FAULT=write:eio:" + std::to_string(after / 2)},
               kRunTimeoutSeconds);
  ASSERT_NE(r.exit_code, 0) << describe(r);
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_NE(r.err.find(".swp"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Input/output error"), std::string::npos) << r.err;
  const auto steps = read_step_log(job.log_path);
  ASSERT_GE(steps.size(), 2u);
  EXPECT_LT(steps.size(), 4u) << "step 4 must not have completed";
  auto resume = tiny_job(dir, "resume", config, 2);
  resume.steps = 4;
  resume.extra = {"--resume", dir.file("ckpt")};
  r = run_train(resume);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
}

TEST(TrainNvmeFaults, AnUnusableNvmePathIsOneLineAndExit2) {
  TempDir dir;
  write_text(dir.file("a_file"), "not a directory");
  for (const std::string& path : {dir.file("a_file"), std::string("/proc/zoff_nvme")}) {
    auto job = tiny_job(dir, "bad", tiny_config(2, "nvme", path), 1);
    auto r = run_train(job);
    expect_one_line_refusal(r, {path});
  }
}

// The tier preallocates its files: a disk too small for the states fails at start, naming
// the file and ENOSPC, before any step.
TEST(TrainNvmeFaults, ADiskTooSmallFailsAtStartNamingTheFile) {
  TempDir dir;
  const std::string small = dir.file("small");
  std::filesystem::create_directories(small);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a 1 MiB tmpfs here: " << std::strerror(errno);
  }
  auto job = tiny_job(dir, "enospc", tiny_config(2, "nvme", small), 1);
  auto r = run_train(job);
  ::umount(small.c_str());
  EXPECT_NE(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find(small), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_TRUE(read_step_log(job.log_path).empty());
}

// Files a killed run left are removed with a warning, never read as states.
TEST(TrainNvmeFaults, StaleTierFilesAreRemovedWithAWarning) {
  TempDir dir;
  const std::string nvme = dir.file("nvme");
  std::filesystem::create_directories(nvme);
  write_text(nvme + "/zoff_rank0.master.swp", std::string(8192, 'x'));
  write_text(nvme + "/someone_elses_file", "keep me");
  auto job = tiny_job(dir, "stale", tiny_config(2, "nvme", nvme), 1);
  job.steps = 2;
  auto r = run_train(job);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("stale"), std::string::npos) << r.err;
  EXPECT_EQ(read_text(nvme + "/someone_elses_file"), "keep me");
}

}  // namespace
}  // namespace zoff::cli_test::train_nvme_test
