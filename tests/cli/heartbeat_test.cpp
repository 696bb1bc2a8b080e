// A stopped rank is found: `zoff launch -n 2 -- zoff train` with one rank SIGSTOPped fails within
// --heartbeat-timeout naming it; an unresolvable --master-addr / MASTER_ADDR fails at once; a bad
// --heartbeat-timeout is refused.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "cli_test_support.h"
#include "zoff/dist/free_port.h"

namespace zoff::cli_test::heartbeat_test {
namespace {

// Short so the test is quick; the collectives keep their default 300 s timeout, which is what
// caught a stopped rank before.
constexpr int kHeartbeatTimeoutSeconds = 5;
// The job must be gone this soon after the stop: the heartbeat timeout plus a beat interval
// (the launcher continues the stopped rank along with SIGTERM) and room for a loaded 2-core
// machine. Far below the 300 s collective timeout.
constexpr double kStopBoundSeconds = 60.0;
// Rank 1 is stopped this long after rank 0 logged its first step.
constexpr double kStopAfterFirstStepSeconds = 1.0;
// An unresolvable address must fail this fast (the rendezvous would wait 300 s).
constexpr double kResolveBoundSeconds = 20.0;

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string write_config(const TempDir& dir) {
  nlohmann::json config = example_config("test_mlp_exact.json");
  config["zero_optimization"]["stage"] = 2;
  const std::string path = dir.file("config.json");
  write_text(path, config.dump(2));
  return path;
}

// The one line of `err` that starts with `prefix` (after an optional "[rank R] "), or "".
std::string line_with(const std::string& err, const std::string& text) {
  for (const auto& line : lines_of(err)) {
    if (line.find(text) != std::string::npos) return line;
  }
  return "";
}

// `zoff launch -n 2 -- zoff train` (100000 steps) with rank `stopped_rank` SIGSTOPped one second
// after rank 0 logged its first step; checks the job ended soon after the stop, with exit 1 and
// every rank gone. Returns the stderr line holding `expected` ("" if none).
std::string run_with_stopped_rank(int stopped_rank, const std::string& expected) {
  TempDir dir;
  const std::string config_path = write_config(dir);
  const std::string log = dir.file("log.jsonl");
  // Every rank records its pid; the stopped rank starts a watcher that waits for the first
  // logged step (at most 120 s), notes the time and SIGSTOPs the rank: all its threads stop,
  // the heartbeat's too.
  const std::string script =
      "echo $$ > \"$DIR/pid.$RANK\"\n"
      "if [ \"$RANK\" = " +
      std::to_string(stopped_rank) +
      " ]; then\n"
      "  (i=0; while [ ! -s \"$LOG\" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n"
      "   sleep " +
      std::to_string(kStopAfterFirstStepSeconds) +
      "\n"
      "   date +%s.%N > \"$DIR/stopped_at\"; kill -STOP $$) &\n"
      "fi\n"
      "exec \"$ZOFF\" train --model mlp --config \"$CONFIG\" --steps 100000 --threads 1 "
      "--heartbeat-timeout " +
      std::to_string(kHeartbeatTimeoutSeconds) + " --log \"$LOG\"\n";
  const ProcessResult r = run_zoff(
      {"launch", "-n", "2", "--threads-per-rank", "1", "--timeout",
       std::to_string(kLaunchTimeoutSeconds), "--", "/bin/sh", "-c", script},
      {"DIR=" + dir.path(), "LOG=" + log, "CONFIG=" + config_path, std::string("ZOFF=") + ZOFF_EXE},
      kRunTimeoutSeconds);
  const double ended = wall_seconds();
  EXPECT_FALSE(r.timed_out) << describe(r);
  std::ifstream stopped_file(dir.file("stopped_at"));
  double stopped = 0;
  EXPECT_TRUE(stopped_file >> stopped) << "the watcher never stopped the rank\n" << describe(r);
  EXPECT_GE(read_step_log(log).size(), 1u);
  EXPECT_EQ(r.exit_code, 1) << describe(r);
  const double stop_seconds = ended - stopped;
  EXPECT_GE(stop_seconds, kHeartbeatTimeoutSeconds - 1.0) << describe(r);
  EXPECT_LT(stop_seconds, kStopBoundSeconds) << describe(r);
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream pid_file(dir.file("pid." + std::to_string(rank)));
    pid_t pid = 0;
    EXPECT_TRUE(pid_file >> pid) << "rank " << rank << " never started";
    EXPECT_TRUE(pid > 0 && kill(pid, 0) == -1 && errno == ESRCH)
        << "rank " << rank << " (pid " << pid << ") is still there";
  }
  const std::string message = line_with(r.err, expected);
  EXPECT_NE(message, "") << describe(r);
  std::printf("[stopped rank %d] exit %d, job gone %.2f s after SIGSTOP: \"%s\"\n", stopped_rank,
              r.exit_code, stop_seconds, message.c_str());
  std::fflush(stdout);
  return message;
}

// Rank 0 watches every rank's heartbeat and names the silent one.
TEST(Heartbeat, StoppedRankFailsTheRunWithinTheHeartbeatTimeoutNamingIt) {
  const std::string message = run_with_stopped_rank(
      1, "rank 1 (on 127.0.0.1) sent no heartbeat for " + std::to_string(kHeartbeatTimeoutSeconds) +
             " s (stopped, wedged or cut off?)");
  EXPECT_EQ(message.rfind("[rank 0] zoff: error: ", 0), 0u) << message;
}

// A stopped rank 0 stops the store it hosts: the other ranks' heartbeats go unanswered.
TEST(Heartbeat, StoppedRankZeroIsNamedByTheOthers) {
  const std::string message =
      run_with_stopped_rank(0, "rank 0 (host of the rendezvous store at 127.0.0.1:");
  EXPECT_EQ(message.rfind("[rank 1] zoff: error: ", 0), 0u) << message;
  EXPECT_NE(message.find("did not answer for " + std::to_string(kHeartbeatTimeoutSeconds) +
                         " s (stopped, wedged or cut off?)"),
            std::string::npos)
      << message;
}

// Every rank finishing at its own pace is not a silence: rank 0 evaluates alone at the end
// while rank 1 has finished (and stopped beating) already.
TEST(Heartbeat, ATwoRankRunWithAShortHeartbeatFinishesCleanly) {
  TempDir dir;
  TrainJob job;
  job.config_path = write_config(dir);
  job.world = 2;
  job.steps = 4;
  job.extra = {"--heartbeat-timeout", "1"};
  const ProcessResult r = run_train(job);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(line_with(r.err, "heartbeat"), "") << describe(r);
}

TEST(MasterAddr, UnresolvableAddressFailsTheLauncherAtOnce) {
  TempDir dir;
  const ProcessResult r =
      run_zoff({"launch", "-n", "2", "--master-addr", "no-such-host.invalid", "--", ZOFF_EXE,
                "train", "--config", write_config(dir), "--steps", "1", "--threads", "1"},
               {}, kRunTimeoutSeconds);
  ASSERT_FALSE(r.timed_out) << describe(r);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << describe(r);
  EXPECT_NE(lines[0].find("--master-addr no-such-host.invalid: cannot be resolved"),
            std::string::npos)
      << lines[0];
  EXPECT_LT(r.seconds, kResolveBoundSeconds) << describe(r);
}

// The rank side, for jobs started by something else than `zoff launch`.
TEST(MasterAddr, UnresolvableAddressFailsTheRankAtOnce) {
  TempDir dir;
  const ProcessResult r =
      run_zoff({"train", "--config", write_config(dir), "--steps", "1", "--threads", "1"},
               {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=no-such-host.invalid",
                "MASTER_PORT=" + std::to_string(dist::pick_free_port())},
               kRunTimeoutSeconds);
  ASSERT_FALSE(r.timed_out) << describe(r);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  const std::string line = line_with(r.err, "zoff: error:");
  EXPECT_NE(line.find("MASTER_ADDR=no-such-host.invalid: cannot be resolved"), std::string::npos)
      << describe(r);
  EXPECT_EQ(lines_of(r.err).size(), 1u) << describe(r);
  EXPECT_LT(r.seconds, kResolveBoundSeconds) << describe(r);
}

TEST(Heartbeat, BadHeartbeatTimeoutIsRefusedNamingIt) {
  TempDir dir;
  const std::string config = write_config(dir);
  for (const std::string value : {"-1", "86401", "1.5", "soon"}) {
    const ProcessResult r = run_zoff({"train", "--config", config, "--steps", "1", "--threads", "1",
                                      "--heartbeat-timeout", value},
                                     {}, kRunTimeoutSeconds);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    const auto lines = lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << describe(r);
    EXPECT_EQ(lines[0].rfind("zoff: error:", 0), 0u) << lines[0];
    EXPECT_NE(lines[0].find("--heartbeat-timeout"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find(value), std::string::npos) << lines[0];
    std::printf("[refused] %s\n", lines[0].c_str());
  }
}

}  // namespace
}  // namespace zoff::cli_test::heartbeat_test
