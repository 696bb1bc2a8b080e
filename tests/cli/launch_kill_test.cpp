// `zoff launch -n 3 -- zoff train`: one training rank SIGKILLed mid-run takes the whole job down.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "cli_test_support.h"
#include "zoff/dist/free_port.h"

namespace zoff::cli_test::launch_kill_test {
namespace {

// Without a launcher, the survivors notice the dead peer through Gloo (a closed connection)
// or, at the latest, through --comm-timeout.
constexpr int kCommTimeoutSeconds = 10;
// The job must be gone this soon after the kill: a no-hang bound with room for a loaded
// 2-core machine, not a performance figure.
constexpr double kStopBoundSeconds = 30.0;
// Rank 1 is killed this long after rank 0 logged its first step (training is under way and
// the ranks meet in collectives every step).
constexpr double kKillAfterFirstStepSeconds = 1.0;

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST(LaunchKill, KilledTrainingRankStopsTheJobAndIsNamed) {
  TempDir dir;
  nlohmann::json config = example_config("test_mlp_exact.json");
  config["zero_optimization"]["stage"] = 2;
  const std::string config_path = dir.file("config.json");
  write_text(config_path, config.dump(2));
  const std::string log = dir.file("log.jsonl");
  const std::string killed_at = dir.file("killed_at");
  // Every rank records its pid (exec keeps it); rank 1 starts a watcher that waits for the
  // first logged step (at most 120 s), notes the time and SIGKILLs the rank.
  const std::string script =
      "echo $$ > \"$DIR/pid.$RANK\"\n"
      "if [ \"$RANK\" = 1 ]; then\n"
      "  (i=0; while [ ! -s \"$LOG\" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n"
      "   sleep " +
      std::to_string(kKillAfterFirstStepSeconds) +
      "\n"
      "   date +%s.%N > \"$DIR/killed_at\"; kill -9 $$) &\n"
      "fi\n"
      "exec \"$ZOFF\" train --model mlp --config \"$CONFIG\" --steps 100000 --threads 1 --log "
      "\"$LOG\"\n";
  const ProcessResult r = run_zoff(
      {"launch", "-n", "3", "--threads-per-rank", "1", "--timeout",
       std::to_string(kLaunchTimeoutSeconds), "--", "/bin/sh", "-c", script},
      {"DIR=" + dir.path(), "LOG=" + log, "CONFIG=" + config_path, std::string("ZOFF=") + ZOFF_EXE},
      kRunTimeoutSeconds);
  const double ended = wall_seconds();
  ASSERT_FALSE(r.timed_out) << describe(r);

  // Rank 1 was killed while training ran.
  std::ifstream killed_file(killed_at);
  double killed = 0;
  ASSERT_TRUE(killed_file >> killed) << "the watcher never killed rank 1\n" << describe(r);
  const auto steps = read_step_log(log);
  EXPECT_GE(steps.size(), 1u);

  EXPECT_EQ(r.exit_code, 1) << describe(r);
  const std::string named = "zoff launch: rank 1 was killed by signal 9 (SIGKILL)";
  EXPECT_NE(r.err.find(named), std::string::npos) << describe(r);
  const double stop_seconds = ended - killed;
  EXPECT_LT(stop_seconds, kStopBoundSeconds) << describe(r);

  // No rank outlives the launcher.
  for (int rank = 0; rank < 3; ++rank) {
    std::ifstream pid_file(dir.file("pid." + std::to_string(rank)));
    pid_t pid = 0;
    ASSERT_TRUE(pid_file >> pid) << "rank " << rank << " never started";
    EXPECT_TRUE(kill(pid, 0) == -1 && errno == ESRCH)
        << "rank " << rank << " (pid " << pid << ") is still there";
  }
  std::string message;
  for (const auto& line : lines_of(r.err)) {
    if (line.rfind("zoff launch:", 0) == 0) message = line;
  }
  std::printf(
      "[kill] exit %d after %zu logged steps; job gone %.2f s after the kill (%.1f s "
      "total); \"%s\"\n",
      r.exit_code, steps.size(), stop_seconds, r.seconds, message.c_str());
  std::fflush(stdout);
}

// Whether `pid` is gone (or a zombie nobody has reaped yet: it runs nothing).
bool gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_text, name, state;
  return !(stat >> pid_text >> name >> state) || state == "Z";
}

// A launcher that is SIGKILLed cannot stop its ranks: they die with it (PR_SET_PDEATHSIG), so
// no rank is left running on a host whose launcher is gone.
TEST(LaunchKill, AKilledLauncherTakesItsRanksWithIt) {
  TempDir dir;
  // Each rank records its pid; rank 1 kills the launcher ($PPID) a second later.
  const std::string script =
      "echo $$ > \"$DIR/pid.$RANK\"\n"
      "if [ \"$RANK\" = 1 ]; then (sleep 1; kill -9 $PPID) & fi\n"
      "exec sleep 120\n";
  const ProcessResult r = run_zoff({"launch", "-n", "2", "--", "/bin/sh", "-c", script},
                                   {"DIR=" + dir.path()}, kRunTimeoutSeconds);
  ASSERT_FALSE(r.timed_out) << describe(r);
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream pid_file(dir.file("pid." + std::to_string(rank)));
    pid_t pid = 0;
    ASSERT_TRUE(pid_file >> pid) << "rank " << rank << " never started: " << describe(r);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!gone(pid) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(gone(pid)) << "rank " << rank << " (pid " << pid << ") outlived its launcher";
  }
}

// No launcher to stop them: three `zoff train` ranks started by a shell, rank 1 SIGKILLed
// mid-run. The two survivors, blocked in the step's collectives, must fail on their own
// (exit 1, one "zoff: error:" line) instead of waiting forever.
TEST(LaunchKill, SurvivingRanksFailOnTheirOwnWhenAPeerDies) {
  TempDir dir;
  nlohmann::json config = example_config("test_mlp_exact.json");
  config["zero_optimization"]["stage"] = 2;
  const std::string config_path = dir.file("config.json");
  write_text(config_path, config.dump(2));
  const std::string script =
      "export MASTER_ADDR=127.0.0.1 WORLD_SIZE=3 LOCAL_WORLD_SIZE=3\n"
      "for r in 0 1 2; do\n"
      "  RANK=$r LOCAL_RANK=$r \"$ZOFF\" train --model mlp --config \"$CONFIG\" --steps 100000 "
      "--threads 1 --comm-timeout " +
      std::to_string(kCommTimeoutSeconds) +
      " --log \"$DIR/log.$r\" > \"$DIR/out.$r\" 2> \"$DIR/err.$r\" &\n"
      "  eval p$r=$!\n"
      "done\n"
      "i=0; while [ ! -s \"$DIR/log.0\" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n"
      "sleep " +
      std::to_string(kKillAfterFirstStepSeconds) +
      "\n"
      "date +%s.%N > \"$DIR/killed_at\"; kill -9 $p1\n"
      "wait $p0; echo \"rank 0 exit $?\"; date +%s.%N > \"$DIR/done.0\"\n"
      "wait $p2; echo \"rank 2 exit $?\"; date +%s.%N > \"$DIR/done.2\"\n";
  const ProcessResult r =
      run_process({"/bin/sh", "-c", script},
                  {"DIR=" + dir.path(), "CONFIG=" + config_path, std::string("ZOFF=") + ZOFF_EXE,
                   "MASTER_PORT=" + std::to_string(dist::pick_free_port())},
                  kRunTimeoutSeconds);
  ASSERT_FALSE(r.timed_out) << describe(r);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::ifstream killed_file(dir.file("killed_at"));
  double killed = 0;
  ASSERT_TRUE(killed_file >> killed) << describe(r);
  EXPECT_GE(read_step_log(dir.file("log.0")).size(), 1u);
  for (int rank : {0, 2}) {
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + " exit 1"), std::string::npos)
        << describe(r);
    std::ifstream done_file(dir.file("done." + std::to_string(rank)));
    double done = 0;
    ASSERT_TRUE(done_file >> done);
    const std::string err = read_text(dir.file("err." + std::to_string(rank)));
    std::string error_line;
    int error_lines = 0;
    for (const auto& line : lines_of(err)) {
      if (line.rfind("zoff: error:", 0) == 0) {
        error_line = line;
        ++error_lines;
      }
    }
    EXPECT_EQ(error_lines, 1) << err;
    EXPECT_LT(done - killed, kStopBoundSeconds) << "rank " << rank;
    std::printf("[peer-death] rank %d exit 1 %.2f s after rank 1 was killed: \"%s\"\n", rank,
                done - killed, error_line.c_str());
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace zoff::cli_test::launch_kill_test
