// Runs the real `zoff` binary as a user would (fork/exec, bounded time) and reads what it wrote.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "zoff_test_paths.h"

extern char** environ;

namespace zoff::cli_test {

// What one run of a program did. Exactly one of exit_code >= 0 / term_signal > 0 holds,
// unless the run timed out (then the group was killed and timed_out is set).
struct ProcessResult {
  int exit_code = -1;   // WEXITSTATUS, -1 when killed by a signal
  int term_signal = 0;  // WTERMSIG, 0 when it exited
  bool timed_out = false;
  std::string out;
  std::string err;
  double seconds = 0;  // wall time from fork to reaping
};

// Environment variables a surrounding launcher (or CI) might have set that would turn a
// plain `zoff train` into one rank of some other job. Tests set them explicitly when wanted.
inline const std::vector<std::string>& job_variables() {
  static const std::vector<std::string> names = {
      "RANK",        "WORLD_SIZE",  "LOCAL_RANK",       "LOCAL_WORLD_SIZE", "GROUP_RANK",
      "MASTER_ADDR", "MASTER_PORT", "ZOFF_NUM_THREADS", "OMP_NUM_THREADS"};
  return names;
}

// The inherited environment without job_variables() and without the names in `set`, then
// `set` ("NAME=value" entries) appended.
inline std::vector<std::string> child_environment(const std::vector<std::string>& set) {
  std::set<std::string> drop(job_variables().begin(), job_variables().end());
  for (const auto& entry : set) drop.insert(entry.substr(0, entry.find('=')));
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (drop.count(entry.substr(0, entry.find('='))) == 0) env.push_back(entry);
  }
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

// SIGTERM to the child's process group, then SIGKILL after `grace`: `zoff launch` forwards
// SIGTERM to its ranks (which run in groups of their own), so they do not outlive the test.
inline void stop_group(pid_t pid, std::chrono::milliseconds grace) {
  kill(-pid, SIGTERM);
  const auto until = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < until) {
    siginfo_t info{};
    // Look without reaping: the caller reaps and reads the status.
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid == pid) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid, SIGKILL);
}

// Runs argv[0] (a path) with `env_set` added to the environment, stdin from /dev/null,
// stdout and stderr captured, in a process group of its own. Nothing hangs: past
// `timeout_seconds` the group is stopped and the result says timed_out.
inline ProcessResult run_process(const std::vector<std::string>& argv,
                                 const std::vector<std::string>& env_set, double timeout_seconds) {
  using Clock = std::chrono::steady_clock;
  // argv/envp are built before fork: the child only makes async-signal-safe calls.
  std::vector<std::string> env = child_environment(env_set);
  std::vector<char*> argp, envp;
  std::vector<std::string> args = argv;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe2: " << std::strerror(errno);
    return {};
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(null_fd, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execve(argp[0], argp.data(), envp.data());
    _exit(127);
  }
  close(null_fd);
  close(out_pipe[1]);
  close(err_pipe[1]);
  ProcessResult result;
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return result;
  }
  setpgid(pid, pid);  // also done by the child; whichever runs first

  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_seconds));
  int fds[2] = {out_pipe[0], err_pipe[0]};
  std::string* sinks[2] = {&result.out, &result.err};
  bool reaped = false;
  int status = 0;
  auto drain_until = Clock::time_point::max();
  std::vector<char> buffer(64 * 1024);
  while (fds[0] >= 0 || fds[1] >= 0) {
    const auto now = Clock::now();
    if (!reaped && now >= deadline) {
      result.timed_out = true;
      stop_group(pid, std::chrono::milliseconds(3000));
    }
    if (!reaped && waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      // Something the child started may still hold the pipes: read on only briefly.
      drain_until = Clock::now() + std::chrono::seconds(2);
    }
    if (reaped && Clock::now() >= drain_until) break;
    pollfd pfds[2];
    nfds_t n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0) continue;
      pfds[n] = {fds[i], POLLIN, 0};
      which[n++] = i;
    }
    if (poll(pfds, n, 20) <= 0) continue;
    for (nfds_t k = 0; k < n; ++k) {
      if (pfds[k].revents == 0) continue;
      const int i = which[k];
      const ssize_t got = read(fds[i], buffer.data(), buffer.size());
      if (got > 0) {
        sinks[i]->append(buffer.data(), static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i]);
        fds[i] = -1;
      }
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  if (!reaped) {
    // Pipes closed before the exit was seen: wait for it, still bounded by the deadline.
    while (waitpid(pid, &status, WNOHANG) != pid) {
      if (Clock::now() >= deadline && !result.timed_out) {
        result.timed_out = true;
        stop_group(pid, std::chrono::milliseconds(3000));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  return result;
}

// `zoff ARGS...` with the given extra environment.
inline ProcessResult run_zoff(const std::vector<std::string>& args,
                              const std::vector<std::string>& env_set = {},
                              double timeout_seconds = 300) {
  std::vector<std::string> argv = {ZOFF_EXE};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, env_set, timeout_seconds);
}

// One `zoff train` job as the tests vary it. One intra-op thread per rank: CI has 2 cores
// and up to 3 ranks share them.
struct TrainJob {
  std::string model = "mlp";
  std::string preset;  // "" = the model's default
  std::string config_path;
  int64_t steps = 1;
  uint64_t seed = 0;
  int world = 1;  // > 1: run through `zoff launch -n world`
  bool reference = false;
  std::string log_path;            // "" = no --log
  std::string save_model_path;     // "" = no --save-model
  std::vector<std::string> extra;  // more `zoff train` flags (--save, --resume, ...)
};

// A launched job stops itself after this long (a hang bound, not a performance figure);
// run_process's own bound is a little longer so the launcher gets to report it.
constexpr double kLaunchTimeoutSeconds = 500;
constexpr double kRunTimeoutSeconds = 540;

// The `zoff` arguments for `job`: `train ...`, or `launch -n W ... -- zoff train ...`.
inline std::vector<std::string> train_args(const TrainJob& job) {
  std::vector<std::string> train = {"train",
                                    "--model",
                                    job.model,
                                    "--config",
                                    job.config_path,
                                    "--steps",
                                    std::to_string(job.steps),
                                    "--seed",
                                    std::to_string(job.seed),
                                    "--threads",
                                    "1"};
  if (!job.preset.empty()) train.insert(train.end(), {"--preset", job.preset});
  if (job.reference) train.push_back("--reference");
  if (!job.log_path.empty()) train.insert(train.end(), {"--log", job.log_path});
  if (!job.save_model_path.empty())
    train.insert(train.end(), {"--save-model", job.save_model_path});
  train.insert(train.end(), job.extra.begin(), job.extra.end());
  if (job.world == 1) return train;
  std::vector<std::string> args = {"launch",
                                   "-n",
                                   std::to_string(job.world),
                                   "--threads-per-rank",
                                   "1",
                                   "--timeout",
                                   std::to_string(kLaunchTimeoutSeconds),
                                   "--",
                                   ZOFF_EXE};
  args.insert(args.end(), train.begin(), train.end());
  return args;
}

inline ProcessResult run_train(const TrainJob& job) {
  return run_zoff(train_args(job), {}, kRunTimeoutSeconds);
}

// gtest output for a failed run: how it ended and what it said.
inline std::string describe(const ProcessResult& r) {
  std::ostringstream os;
  os << "exit " << r.exit_code << ", signal " << r.term_signal << (r.timed_out ? ", TIMED OUT" : "")
     << ", " << r.seconds << " s\n--- stdout ---\n"
     << r.out << "--- stderr ---\n"
     << r.err;
  return os.str();
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The run was refused as bad input: exit 2 and a single "zoff: error:" line on stderr
// containing every string in `named` (the bad value, the flag, the reason).
inline void expect_one_line_refusal(const ProcessResult& r, const std::vector<std::string>& named) {
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << describe(r);
  EXPECT_EQ(lines[0].rfind("zoff: error:", 0), 0u) << lines[0];
  for (const auto& s : named) EXPECT_NE(lines[0].find(s), std::string::npos) << lines[0];
}

// A fresh directory per test, removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/zoff_cli_test_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp " << pattern << ": " << std::strerror(errno);
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

// A config from examples/configs, parsed, for tests to adjust and write into their TempDir.
// Stage 3, bf16, 2 samples per step, AdamW with `state_dtype` states: the fp32 master,
// the states and the parameters in files under `nvme`, gradients streamed into the step.
inline nlohmann::json on_disk_stage3_config(const std::string& nvme,
                                            const std::string& state_dtype = "fp32",
                                            int64_t sub_group_size = 4096) {
  return {
      {"train_batch_size", 2},
      {"train_micro_batch_size_per_gpu", 1},
      {"optimizer", {{"type", "AdamW"}, {"state_dtype", state_dtype}, {"params", {{"lr", 1e-3}}}}},
      {"bf16", {{"enabled", true}}},
      {"zero_optimization",
       {{"stage", 3},
        {"sub_group_size", sub_group_size},
        {"offload_optimizer", {{"device", "nvme"}, {"nvme_path", nvme}, {"gradients", "stream"}}},
        {"offload_param", {{"device", "nvme"}, {"nvme_path", nvme}}}}}};
}

inline nlohmann::json example_config(const std::string& name) {
  return nlohmann::json::parse(
      read_text(std::string(ZOFF_SOURCE_DIR) + "/examples/configs/" + name));
}

// The step lines of a `--log` JSONL file (eval lines are skipped), in order. A last line
// without '\n' is one a killed run was writing: it is left out.
inline std::vector<nlohmann::json> read_step_log(const std::string& path) {
  std::string text = read_text(path);
  text.erase(text.find_last_of('\n') == std::string::npos ? 0 : text.find_last_of('\n') + 1);
  std::vector<nlohmann::json> steps;
  for (const auto& line : lines_of(text)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    if (!j.contains("event")) steps.push_back(std::move(j));
  }
  return steps;
}

// The mean loss of the last `n` step records (one step's batch is noisy): what the
// convergence tests compare. `rows` must hold at least `n` records.
inline double mean_last_loss(const std::vector<nlohmann::json>& rows, size_t n) {
  double sum = 0;
  for (size_t i = rows.size() - n; i < rows.size(); ++i) sum += rows[i].at("loss").get<double>();
  return sum / static_cast<double>(n);
}

// A `--save-model` archive: every tensor by name (the names of named_parameters()).
inline std::map<std::string, torch::Tensor> load_model_archive(const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& key : archive.keys()) {
    torch::Tensor t;
    archive.read(key, t);
    tensors[key] = t;
  }
  return tensors;
}

}  // namespace zoff::cli_test
