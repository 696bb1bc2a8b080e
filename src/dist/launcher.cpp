// The local half of `zoff launch`: fork/exec the ranks, relay their output by line, stop them all
// on failure.
#include "zoff/dist/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "zoff/core/error.h"
#include "zoff/core/limits.h"
#include "zoff/dist/free_port.h"
#include "zoff/dist/world.h"

extern char** environ;

namespace zoff::dist {
namespace {

using Clock = std::chrono::steady_clock;

// A forwarded signal the launcher received (SIGINT/SIGTERM), 0 if none since last look.
volatile std::sig_atomic_t g_received_signal = 0;
extern "C" void remember_signal(int signo) { g_received_signal = signo; }

// Installs the launcher's signal handling for the lifetime of launch() and restores the
// caller's afterwards. SIGPIPE is ignored so a closed stdout is a write error, not death.
class SignalScope {
 public:
  SignalScope() {
    struct sigaction action {};
    action.sa_handler = remember_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &old_pipe_);
    g_received_signal = 0;
  }
  ~SignalScope() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  struct sigaction old_pipe_ {};
};

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "an unknown signal";
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return detail::concat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return detail::concat("was killed by signal ", WTERMSIG(status), " (",
                          signal_name(WTERMSIG(status)), ")");
  }
  return detail::concat("ended with wait status ", status);
}

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

// Writes everything unless the destination is gone (EPIPE, ...): the ranks' output is then
// dropped rather than blocking or killing the launcher.
void write_all(int fd, const std::string& text) {
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    written += static_cast<size_t>(n);
  }
}

// One output stream of one rank: a pipe and the bytes after its last newline.
struct RankStream {
  int fd = -1;       // read end, -1 once closed
  int dest_fd = -1;  // launcher's stdout or stderr
  std::string pending;
};

// A line longer than this without '\n' is passed on in pieces, so memory stays bounded.
constexpr size_t kMaxPendingBytes = 64 * 1024;

// Moves every complete line of `stream.pending` to its destination with the prefix; at EOF
// also the unterminated rest, completed with '\n'.
void relay_lines(RankStream& stream, const std::string& prefix, bool at_eof) {
  std::string out;
  size_t begin = 0;
  while (true) {
    const size_t newline = stream.pending.find('\n', begin);
    if (newline == std::string::npos) break;
    out += prefix;
    out.append(stream.pending, begin, newline + 1 - begin);
    begin = newline + 1;
  }
  stream.pending.erase(0, begin);
  if (!stream.pending.empty() && (at_eof || stream.pending.size() >= kMaxPendingBytes)) {
    out += prefix + stream.pending + "\n";
    stream.pending.clear();
  }
  if (!out.empty()) write_all(stream.dest_fd, out);
}

struct RankProcess {
  int rank = 0;    // global rank
  pid_t pid = -1;  // also its process group id
  bool running = false;
  int status = 0;
  RankStream out, err;
};

// argv/envp as the NULL-terminated arrays execve takes, built before fork so the child only
// makes async-signal-safe calls.
struct ExecArgs {
  std::vector<std::string> storage;
  std::vector<char*> pointers;
  explicit ExecArgs(std::vector<std::string> strings) : storage(std::move(strings)) {
    for (auto& s : storage) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// In the child: own process group, pipes as stdout/stderr, /dev/null as stdin, default
// signal handling, killed when the launcher dies (a SIGKILLed launcher cannot stop its ranks,
// and a rank left running on one host would hold the others in their collectives), then the
// program. Only async-signal-safe calls.
[[noreturn]] void exec_rank(const std::string& path, ExecArgs& argv, ExecArgs& envp, int out_fd,
                            int err_fd, int null_fd, pid_t launcher) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127);  // the launcher died before prctl took effect
  setpgid(0, 0);
  dup2(null_fd, STDIN_FILENO);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int signo : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD}) sigaction(signo, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(path.c_str(), argv.pointers.data(), envp.pointers.data());
  const char message[] = "zoff launch: execve failed\n";
  ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
  (void)ignored;
  _exit(127);
}

void signal_groups(const std::vector<RankProcess>& ranks, int signo) {
  for (const auto& r : ranks) {
    if (r.pid > 0) kill(-r.pid, signo);  // ESRCH for an empty group is fine
  }
}

// Why the launcher stopped the job early, if it did.
enum class StopReason { kNone, kRankFailed, kTimedOut, kInterrupted };

constexpr Clock::time_point kNever = Clock::time_point::max();

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Forks and execs one process per local rank, each in its own process group with its stdout
// and stderr on pipes. If one cannot be started, those already started are killed and reaped
// and the error names the rank.
std::vector<RankProcess> start_ranks(const LaunchOptions& options, const std::string& path,
                                     int port, int threads) {
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) base_env.emplace_back(*e);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ZOFF_CHECK(null_fd >= 0, "launch: cannot open /dev/null: ", std::strerror(errno));
  std::vector<RankProcess> ranks(options.nproc_per_node);
  for (int local = 0; local < options.nproc_per_node; ++local) {
    RankProcess& r = ranks[local];
    r.rank = options.node_rank * options.nproc_per_node + local;
    ExecArgs argv(options.command);
    ExecArgs envp(rank_environment(options, local, port, threads, base_env));
    int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    const bool piped = pipe2(out_pipe, O_CLOEXEC) == 0 && pipe2(err_pipe, O_CLOEXEC) == 0;
    const pid_t launcher = getpid();
    const pid_t pid = piped ? fork() : -1;
    if (pid == 0) exec_rank(path, argv, envp, out_pipe[1], err_pipe[1], null_fd, launcher);
    const int saved_errno = errno;
    for (int* end : {&out_pipe[1], &err_pipe[1]}) close_fd(*end);  // the child's ends
    if (pid < 0) {
      for (int* end : {&out_pipe[0], &err_pipe[0]}) close_fd(*end);
      signal_groups(ranks, SIGKILL);
      for (auto& started : ranks) {
        if (started.pid > 0) waitpid(started.pid, nullptr, 0);
        close_fd(started.out.fd);
        close_fd(started.err.fd);
      }
      close(null_fd);
      throw Error(detail::concat("launch: could not start rank ", r.rank, ": ",
                                 std::strerror(saved_errno)));
    }
    setpgid(pid, pid);  // also done by the child: whichever runs first, no race with kill()
    r.pid = pid;
    r.running = true;
    r.out = {out_pipe[0], STDOUT_FILENO, {}};
    r.err = {err_pipe[0], STDERR_FILENO, {}};
  }
  close(null_fd);
  return ranks;
}

// The ranks' open output pipes, as poll() takes them, and whose each one is.
struct OpenStreams {
  std::vector<pollfd> fds;
  std::vector<std::pair<RankStream*, const RankProcess*>> owners;
};

// What the launcher does while the ranks run: reaps them, stops them all when one fails, the
// job runs past --timeout or the launcher gets SIGINT/SIGTERM (SIGTERM, then SIGKILL after
// --grace), and relays their output line by line until their pipes close.
class Supervisor {
 public:
  Supervisor(std::vector<RankProcess> ranks, const LaunchOptions& options)
      : ranks_(std::move(ranks)),
        options_(options),
        grace_(seconds(options.grace_seconds)),
        job_deadline_(options.timeout_seconds > 0 ? Clock::now() + seconds(options.timeout_seconds)
                                                  : kNever) {}

  // Until every rank exited and its pipes are drained (or the drain time ran out).
  void run() {
    while (true) {
      reap_exited();
      take_signal();
      const auto now = Clock::now();
      enforce_deadlines(now);
      OpenStreams open = open_streams();
      if (!any_running() && drained(now, open.fds.empty())) break;
      relay_ready(open);
    }
    for (auto& r : ranks_) {
      for (RankStream* s : {&r.out, &r.err}) {
        relay_lines(*s, detail::concat("[rank ", r.rank, "] "), true);
        close_fd(s->fd);
      }
    }
    if (reason_ != StopReason::kNone) signal_groups(ranks_, SIGKILL);  // stragglers
  }

  // The launcher's exit code; when the job was stopped, first a line on stderr saying why.
  int finish() const {
    const std::string stopped = others_running_at_stop_ ? "; stopped the other ranks" : "";
    switch (reason_) {
      case StopReason::kNone:
        return 0;
      case StopReason::kRankFailed:
        write_all(STDERR_FILENO, detail::concat("zoff launch: rank ", failed_->rank, " ",
                                                describe_exit(failed_->status), stopped, "\n"));
        return 1;
      case StopReason::kTimedOut:
        write_all(STDERR_FILENO,
                  detail::concat("zoff launch: the job ran past --timeout ",
                                 options_.timeout_seconds, " s; stopped the ranks\n"));
        return 124;
      case StopReason::kInterrupted:
        write_all(STDERR_FILENO, detail::concat("zoff launch: got ", signal_name(received_),
                                                "; forwarded it to the ranks and stopped them\n"));
        return 128 + received_;
    }
    return 1;
  }

 private:
  bool any_running() const {
    return std::any_of(ranks_.begin(), ranks_.end(), [](const auto& r) { return r.running; });
  }

  void begin_stop(StopReason why, int signo) {
    reason_ = why;
    others_running_at_stop_ = any_running();
    signal_groups(ranks_, signo);
    // A stopped rank (SIGSTOP, found by the heartbeat) acts on the signal only once continued.
    if (signo == SIGTERM || signo == SIGINT) signal_groups(ranks_, SIGCONT);
    kill_at_ = Clock::now() + grace_;
  }

  // Records ranks that exited; the first failure stops the others.
  void reap_exited() {
    for (auto& r : ranks_) {
      if (!r.running) continue;
      int status = 0;
      if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.running = false;
      r.status = status;
      if (!succeeded(status) && reason_ == StopReason::kNone) {
        failed_ = &r;
        begin_stop(StopReason::kRankFailed, SIGTERM);
      }
    }
  }

  // A SIGINT/SIGTERM to the launcher stops the job; once stopping, later ones are forwarded.
  void take_signal() {
    const int signo = g_received_signal;
    if (signo == 0) return;
    g_received_signal = 0;
    if (reason_ == StopReason::kNone) {
      received_ = signo;
      begin_stop(StopReason::kInterrupted, signo);
    } else {
      signal_groups(ranks_, signo);
    }
  }

  void enforce_deadlines(Clock::time_point now) {
    if (reason_ == StopReason::kNone && now >= job_deadline_) {
      begin_stop(StopReason::kTimedOut, SIGTERM);
    }
    if (now >= kill_at_) {
      signal_groups(ranks_, SIGKILL);
      kill_at_ = kNever;
    }
  }

  OpenStreams open_streams() {
    OpenStreams open;
    for (auto& r : ranks_) {
      for (RankStream* s : {&r.out, &r.err}) {
        if (s->fd < 0) continue;
        open.fds.push_back({s->fd, POLLIN, 0});
        open.owners.emplace_back(s, &r);
      }
    }
    return open;
  }

  // After the last rank exited: whether to stop relaying. A rank's own children may keep its
  // pipes open after it exited: they are waited for only so long (the grace period; briefly
  // when the job is being stopped anyway).
  bool drained(Clock::time_point now, bool no_open_streams) {
    if (drain_until_ == kNever) {
      drain_until_ = now + (reason_ == StopReason::kNone ? grace_ : std::chrono::milliseconds(500));
    }
    return no_open_streams || now >= drain_until_;
  }

  // Relays what the pipes have; children are reaped by polling, so it waits 20 ms at most.
  void relay_ready(OpenStreams& open) {
    const int ready = poll(open.fds.data(), open.fds.size(), 20);
    if (ready <= 0) return;  // timeout or EINTR (a signal): look at everything again
    for (size_t i = 0; i < open.fds.size(); ++i) {
      if (open.fds[i].revents == 0) continue;
      auto& [stream, rank] = open.owners[i];
      const std::string prefix = detail::concat("[rank ", rank->rank, "] ");
      const ssize_t n = ::read(stream->fd, buffer_.data(), buffer_.size());
      if (n > 0) {
        stream->pending.append(buffer_.data(), static_cast<size_t>(n));
        relay_lines(*stream, prefix, false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        relay_lines(*stream, prefix, true);
        close_fd(stream->fd);
      }
    }
  }

  std::vector<RankProcess> ranks_;
  const LaunchOptions& options_;
  const Clock::duration grace_;
  const Clock::time_point job_deadline_;
  StopReason reason_ = StopReason::kNone;
  const RankProcess* failed_ = nullptr;  // the first rank that failed
  int received_ = 0;                     // the signal that stopped the job
  Clock::time_point kill_at_ = kNever;   // when the ranks still alive after SIGTERM get SIGKILL
  Clock::time_point drain_until_ = kNever;
  bool others_running_at_stop_ = false;
  std::vector<char> buffer_ = std::vector<char>(64 * 1024);
};

}  // namespace

void LaunchOptions::validate() const {
  ZOFF_CHECK_ARG(nproc_per_node >= 1 && nproc_per_node <= 1024, "launch: -n ", nproc_per_node,
                 " must be in [1, 1024]");
  ZOFF_CHECK_ARG(nnodes >= 1, "launch: --nnodes ", nnodes, " must be at least 1");
  ZOFF_CHECK_ARG(node_rank >= 0 && node_rank < nnodes, "launch: --node-rank ", node_rank,
                 " must be in [0, --nnodes ", nnodes, ")");
  ZOFF_CHECK_ARG(master_port >= 0 && master_port <= 65535, "launch: --master-port ", master_port,
                 " must be in [0, 65535]");
  ZOFF_CHECK_ARG(master_port != 0 || nnodes == 1, "launch: --master-port 0 (pick a free port) ",
                 "only works on one node; with --nnodes ", nnodes,
                 " every node needs the same explicit port");
  ZOFF_CHECK_ARG(nnodes == 1 || !master_addr.empty(), "launch: --nnodes ", nnodes,
                 " needs --master-addr: the address of node 0's host, as every node reaches it");
  ZOFF_CHECK_ARG(threads_per_rank >= 0 && threads_per_rank <= kMaxThreads,
                 "launch: --threads-per-rank ", threads_per_rank, " must be in [0, ", kMaxThreads,
                 "] (0: share the cores)");
  ZOFF_CHECK_ARG(timeout_seconds >= 0, "launch: --timeout ", timeout_seconds,
                 " must be >= 0 (0: no limit)");
  ZOFF_CHECK_ARG(grace_seconds >= 0, "launch: --grace ", grace_seconds, " must be >= 0");
  ZOFF_CHECK_ARG(!command.empty() && !command[0].empty(),
                 "launch: no command given; usage: zoff launch -n N -- COMMAND [ARGS...]");
}

std::vector<std::string> rank_environment(const LaunchOptions& options, int local_rank,
                                          int master_port, int threads,
                                          const std::vector<std::string>& base) {
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(options.node_rank * options.nproc_per_node + local_rank)},
      {"WORLD_SIZE", std::to_string(options.nnodes * options.nproc_per_node)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
      {"GROUP_RANK", std::to_string(options.node_rank)},
      {"MASTER_ADDR", options.master_address()},
      {"MASTER_PORT", std::to_string(master_port)},
      {"OMP_NUM_THREADS", std::to_string(threads)},
      {"ZOFF_NUM_THREADS", std::to_string(threads)},
  };
  std::set<std::string> names;
  for (const auto& [name, value] : ours) names.insert(name);
  std::vector<std::string> env;
  for (const auto& entry : base) {
    if (names.count(entry.substr(0, entry.find('='))) == 0) env.push_back(entry);
  }
  for (const auto& [name, value] : ours) env.push_back(name + "=" + value);
  return env;
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

int set_torch_threads_from_env() {
  const char* text = std::getenv("ZOFF_NUM_THREADS");
  if (text == nullptr) return 0;
  char* end = nullptr;
  errno = 0;
  const long threads = std::strtol(text, &end, 10);
  ZOFF_CHECK_ARG(*text != '\0' && *end == '\0' && errno == 0 && threads >= 1 && threads <= 4096,
                 "ZOFF_NUM_THREADS='", text, "' is not a thread count in [1, 4096]");
  torch::set_num_threads(static_cast<int>(threads));
  return static_cast<int>(threads);
}

std::string resolve_command(const std::string& program) {
  auto executable = [](const std::string& path) {
    struct stat info {};
    return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
           access(path.c_str(), X_OK) == 0;
  };
  if (program.find('/') != std::string::npos) {
    ZOFF_CHECK_ARG(executable(program), "launch: command not found or not executable: '", program,
                   "'");
    return program;
  }
  const char* path_env = std::getenv("PATH");
  const std::string search = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= search.size()) {
    size_t end = search.find(':', begin);
    if (end == std::string::npos) end = search.size();
    const std::string dir = end > begin ? search.substr(begin, end - begin) : ".";
    const std::string candidate = dir + "/" + program;
    if (executable(candidate)) return candidate;
    begin = end + 1;
  }
  throw UsageError(detail::concat("launch: command not found: '", program, "' (searched PATH)"));
}

int launch(const LaunchOptions& options) {
  options.validate();
  check_resolvable("launch: --master-addr ", options.master_address());
  const std::string path = resolve_command(options.command[0]);
  // Two ports: the Python module's rendezvous takes MASTER_PORT + 1, so that a process group
  // of the user's own can have MASTER_PORT (python/src/process_comm.cpp).
  const int port = options.master_port != 0 ? options.master_port : pick_free_port(2);
  const int threads = options.threads_per_rank > 0
                          ? options.threads_per_rank
                          : std::max(1, available_cores() / options.nproc_per_node);
  SignalScope signals;
  Supervisor supervisor(start_ranks(options, path, port, threads), options);
  supervisor.run();
  return supervisor.finish();
}

}  // namespace zoff::dist
