// `zoff launch` run for real: rank environments, labelled output, failure and signal handling, bad
// flags.
#include "zoff/dist/launcher.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "zoff/core/error.h"
#include "zoff/dist/world.h"
#include "zoff_test_paths.h"

namespace zoff::dist::launcher_test {
namespace {

// A stopped job must be gone well within this; it is a correctness bound (no hang), with
// room for a loaded 2-core CI machine, not a performance figure.
constexpr double kStopBoundSeconds = 30.0;

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  double seconds = 0;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `zoff ARGS...` through sh, stdout captured, stderr to a temp file.
RunResult run_zoff(const std::vector<std::string>& args, const std::string& env_prefix = "") {
  char err_path[] = "/tmp/zoff_launch_test_XXXXXX";
  const int fd = mkstemp(err_path);
  close(fd);
  std::string command = env_prefix + " " + shell_quote(ZOFF_EXE);
  for (const auto& a : args) command += " " + shell_quote(a);
  command += " 2>" + shell_quote(err_path);
  RunResult result;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.out.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err_file(err_path);
  std::stringstream err;
  err << err_file.rdbuf();
  result.err = err.str();
  unlink(err_path);
  return result;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// True when no process is left in the process group `pgid` (each rank leads its own).
bool group_is_gone(pid_t pgid) { return kill(-pgid, 0) == -1 && errno == ESRCH; }

TEST(Launch, GivesEveryRankItsEnvironment) {
  const auto r = run_zoff({"launch", "-n", "3", "--", "sh", "-c",
                           "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR "
                           "$MASTER_PORT $OMP_NUM_THREADS $ZOFF_NUM_THREADS\""});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int threads = std::max(1, available_cores() / 3);
  std::set<std::string> ports;
  for (int rank = 0; rank < 3; ++rank) {
    bool found = false;
    for (const auto& line : lines_of(r.out)) {
      const std::string prefix = "[rank " + std::to_string(rank) + "] ";
      if (line.rfind(prefix, 0) != 0) continue;
      std::istringstream fields(line.substr(prefix.size()));
      int got_rank, world, local, local_world, port, omp, zoff_threads;
      std::string addr;
      fields >> got_rank >> world >> local >> local_world >> addr >> port >> omp >> zoff_threads;
      ASSERT_FALSE(fields.fail()) << line;
      EXPECT_EQ(got_rank, rank);
      EXPECT_EQ(world, 3);
      EXPECT_EQ(local, rank);
      EXPECT_EQ(local_world, 3);
      EXPECT_EQ(addr, "127.0.0.1");
      EXPECT_GT(port, 0);
      EXPECT_LE(port, 65535);
      EXPECT_EQ(omp, threads);
      EXPECT_EQ(zoff_threads, threads);
      ports.insert(std::to_string(port));
      found = true;
    }
    EXPECT_TRUE(found) << "no line from rank " << rank << " in:\n" << r.out;
  }
  EXPECT_EQ(ports.size(), 1u) << "all ranks must share one rendezvous port";
}

TEST(Launch, PrefixesEveryLineOfStdoutAndStderrAndCompletesAPartialLine) {
  const auto r = run_zoff({"launch", "-n", "2", "--", "sh", "-c",
                           "echo out $RANK; echo err $RANK >&2; echo two $RANK; printf tail$RANK"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string p = "[rank " + std::to_string(rank) + "] ";
    const auto s = std::to_string(rank);
    EXPECT_TRUE(contains(r.out, p + "out " + s + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, p + "two " + s + "\n")) << r.out;
    EXPECT_TRUE(contains(r.out, p + "tail" + s + "\n")) << r.out;
    EXPECT_TRUE(contains(r.err, p + "err " + s + "\n")) << r.err;
  }
  for (const auto& line : lines_of(r.out)) EXPECT_EQ(line.rfind("[rank ", 0), 0u) << line;
  EXPECT_EQ(lines_of(r.out).size(), 6u) << r.out;
}

TEST(Launch, MultiNodeRanksAreOffsetByTheNodeRank) {
  LaunchOptions options;
  options.nproc_per_node = 2;
  options.nnodes = 2;
  options.node_rank = 1;
  options.master_port = 29511;
  options.command = {"true"};
  const auto env =
      rank_environment(options, 1, 29511, 4, {"RANK=99", "PATH=/bin", "OMP_NUM_THREADS=64"});
  auto has = [&](const std::string& entry) {
    return std::find(env.begin(), env.end(), entry) != env.end();
  };
  EXPECT_TRUE(has("RANK=3"));
  EXPECT_TRUE(has("WORLD_SIZE=4"));
  EXPECT_TRUE(has("LOCAL_RANK=1"));
  EXPECT_TRUE(has("LOCAL_WORLD_SIZE=2"));
  EXPECT_TRUE(has("MASTER_PORT=29511"));
  EXPECT_TRUE(has("OMP_NUM_THREADS=4"));
  EXPECT_TRUE(has("ZOFF_NUM_THREADS=4"));
  EXPECT_TRUE(has("PATH=/bin"));
  EXPECT_FALSE(has("RANK=99"));
  EXPECT_FALSE(has("OMP_NUM_THREADS=64"));
}

TEST(Launch, ARankExitingWithThreeStopsTheJobAndIsNamed) {
  const auto r = run_zoff({"launch", "-n", "3", "--", "sh", "-c",
                           "if [ \"$RANK\" = 2 ]; then exit 3; fi; exec sleep 60"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "zoff launch: rank 2 exited with code 3; stopped the other ranks\n"))
      << r.err;
  EXPECT_LT(r.seconds, kStopBoundSeconds);
}

TEST(Launch, ARankKilledBySigkillStopsTheOthersWithinTheBound) {
  const auto r =
      run_zoff({"launch", "-n", "3", "--", "sh", "-c",
                "echo pid $$; if [ \"$RANK\" = 1 ]; then sleep 1; kill -9 $$; fi; exec sleep 60"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(
      r.err, "zoff launch: rank 1 was killed by signal 9 (SIGKILL); stopped the other ranks\n"))
      << r.err;
  EXPECT_LT(r.seconds, kStopBoundSeconds);
  int groups = 0;
  for (const auto& line : lines_of(r.out)) {
    const auto at = line.find("] pid ");
    if (at == std::string::npos) continue;
    const pid_t pid = std::stoi(line.substr(at + 6));
    EXPECT_TRUE(group_is_gone(pid)) << "process group " << pid << " survived: " << line;
    ++groups;
  }
  EXPECT_EQ(groups, 3) << r.out;
}

TEST(Launch, AllRanksSucceedingExitsZero) {
  const auto r = run_zoff({"launch", "-n", "2", "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
}

TEST(Launch, TheJobTimeoutStopsARankThatRunsTooLong) {
  const auto r = run_zoff({"launch", "-n", "2", "--timeout", "1", "--", "sleep", "60"});
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_TRUE(contains(r.err, "ran past --timeout 1 s")) << r.err;
  EXPECT_LT(r.seconds, kStopBoundSeconds);
}

TEST(Launch, SigtermToTheLauncherIsForwardedToTheRanks) {
  // sh runs the launcher in the background, sends it SIGTERM once both ranks are up, and
  // exits with the launcher's status.
  const std::string script =
      shell_quote(ZOFF_EXE) +
      " launch -n 2 -- sh -c 'trap \"echo got TERM; exit 0\" TERM; echo up; "
      "while true; do sleep 0.1; done' & pid=$!; sleep 1.5; kill -TERM $pid; wait $pid";
  FILE* pipe = popen(("sh -c " + shell_quote(script) + " 2>&1").c_str(), "r");
  std::string out;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << out;
  EXPECT_TRUE(contains(out, "[rank 0] got TERM")) << out;
  EXPECT_TRUE(contains(out, "[rank 1] got TERM")) << out;
  EXPECT_TRUE(contains(out, "zoff launch: got SIGTERM; forwarded it to the ranks")) << out;
}

TEST(Launch, BadFlagsExitTwoWithOneLine) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"launch", "-n", "0", "--", "true"}, "-n 0"},
      {{"launch", "-n", "2", "--nnodes", "2", "--node-rank", "2", "--master-port", "29512", "--",
        "true"},
       "--node-rank 2"},
      {{"launch", "-n", "2"}, "no command"},
      {{"launch", "-n", "2", "--master-port", "70000", "--", "true"}, "70000"},
      {{"launch", "-n", "2", "--nnodes", "2", "--", "true"}, "--master-port 0"},
      {{"launch", "-n", "1", "--nnodes", "2", "--master-port", "29512", "--", "true"},
       "--nnodes 2 needs --master-addr"},
      {{"launch", "-n", "2", "--", "zoff-no-such-command"},
       "command not found: 'zoff-no-such-command'"},
      {{"launch", "-n", "abc", "--", "true"}, "abc"},
  };
  for (const auto& [args, needle] : cases) {
    const auto r = run_zoff(args);
    SCOPED_TRACE(needle);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(lines_of(r.err).size(), 1u) << r.err;
    EXPECT_TRUE(contains(r.err, needle)) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(Launch, ThreadCountFromTheEnvironmentReachesLibTorch) {
  const int before = torch::get_num_threads();
  setenv("ZOFF_NUM_THREADS", "1", 1);
  EXPECT_EQ(set_torch_threads_from_env(), 1);
  EXPECT_EQ(torch::get_num_threads(), 1);
  setenv("ZOFF_NUM_THREADS", "many", 1);
  EXPECT_THROW(set_torch_threads_from_env(), UsageError);
  unsetenv("ZOFF_NUM_THREADS");
  EXPECT_EQ(set_torch_threads_from_env(), 0);
  torch::set_num_threads(before);
}

// ---- end to end: `zoff launch` runs this test binary as the ranks of a Gloo job ----

// Only does something when started by LaunchedRanks.AllReduceAndReduceScatterAcrossProcesses.
TEST(LaunchedRank, Body) {
  if (std::getenv("ZOFF_TEST_AS_RANK") == nullptr) GTEST_SKIP() << "runs only under zoff launch";
  const auto world = WorldInfo::from_env();
  set_torch_threads_from_env();
  auto comm = init_comm(world, std::chrono::seconds(20));
  auto t = torch::full({5}, static_cast<float>(world.rank + 1));
  comm->all_reduce_sum(t)->wait();
  auto shards = torch::arange(world.world_size * 3, torch::kFloat);
  auto mine = torch::empty({3});
  comm->reduce_scatter_sum(shards, mine)->wait();
  std::printf("RESULT %s allreduce=%g scatter0=%g\n", comm->backend().c_str(), t[0].item<float>(),
              mine[0].item<float>());
  comm->barrier();
}

std::string self_exe() {
  std::array<char, 4096> path{};
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  return n > 0 ? std::string(path.data(), static_cast<size_t>(n)) : "";
}

TEST(LaunchedRanks, AllReduceAndReduceScatterAcrossProcesses) {
  // One host: shared memory by default, Gloo's TCP when asked; the same sums either way.
  for (const std::string transport : {"shm", "gloo"}) {
    const auto r = run_zoff({"launch", "-n", "2", "--timeout", "60", "--", self_exe(),
                             "--gtest_filter=LaunchedRank.Body"},
                            "ZOFF_TEST_AS_RANK=1 ZOFF_COMM_TRANSPORT=" + transport);
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    // 1 + 2 = 3; rank r gets sum over 2 ranks of element 3r of arange(6): 2 * 3r.
    EXPECT_TRUE(contains(r.out, "[rank 0] RESULT " + transport + " allreduce=3 scatter0=0"))
        << r.out;
    EXPECT_TRUE(contains(r.out, "[rank 1] RESULT " + transport + " allreduce=3 scatter0=6"))
        << r.out;
  }
}

// Only does something when started by LaunchedRanks.APeerThatExitsFailsTheCollectiveAtOnce:
// rank 1 leaves without joining; rank 0's all-reduce (60 s timeout) must notice it has gone.
TEST(LaunchedRank, PeerExits) {
  if (std::getenv("ZOFF_TEST_AS_RANK") == nullptr) GTEST_SKIP() << "runs only under zoff launch";
  const auto world = WorldInfo::from_env();
  auto comm = init_comm(world, std::chrono::seconds(60));
  if (world.rank == 1) std::_Exit(0);
  const auto start = std::chrono::steady_clock::now();
  try {
    comm->all_reduce_sum(torch::ones({4}))->wait();
    std::printf("RESULT no error\n");
  } catch (const Error& e) {
    std::printf("RESULT after %.1f s: %s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                e.what());
  }
  std::fflush(stdout);
  std::_Exit(0);  // the Gloo mesh lost a peer: skip its teardown
}

TEST(LaunchedRanks, APeerThatExitsFailsTheCollectiveAtOnce) {
  const auto r = run_zoff({"launch", "-n", "2", "--timeout", "60", "--", self_exe(),
                           "--gtest_filter=LaunchedRank.PeerExits"},
                          "ZOFF_TEST_AS_RANK=1 ZOFF_COMM_TRANSPORT=shm");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "all_reduce_sum (shm, rank 0 of 2) failed: rank 1 (pid ")) << r.out;
  EXPECT_TRUE(contains(r.out, ") has exited")) << r.out;
  EXPECT_LT(r.seconds, 30.0) << "not the 60 s timeout";
}

TEST(BenchComm, TimesBothTransportsUnderLaunchAndRefusesASingleProcess) {
  const auto r = run_zoff({"launch", "-n", "2", "--timeout", "120", "--", ZOFF_EXE, "bench", "comm",
                           "--numel", "1001", "--repeats", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "[rank 0] {\"world_size\": 2, \"numel\": 1001")) << r.out;
  for (const char* key : {"\"all_gather\": {\"gloo_ms\": ", "\"reduce_scatter\": {\"gloo_ms\": ",
                          "\"shm_ms\": ", "\"bytes_per_rank\": 2002"}) {
    EXPECT_TRUE(contains(r.out, key)) << key << "\n" << r.out;
  }
  EXPECT_FALSE(contains(r.out, "[rank 1] {")) << "only rank 0 reports";
  const auto alone = run_zoff({"bench", "comm"});
  EXPECT_EQ(alone.exit_code, 2) << alone.err;
  EXPECT_TRUE(contains(alone.err, "needs 2 or more ranks on one host")) << alone.err;
  const auto bad = run_zoff({"bench", "comm", "--repeats", "0"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "--repeats 0")) << bad.err;
}

}  // namespace
}  // namespace zoff::dist::launcher_test
