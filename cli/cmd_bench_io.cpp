// `zoff bench io`: the NVMe tier's read/write GB/s for the swap pattern against fio, same run.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "bench_io.h"
#include "zoff/core/error.h"
#include "zoff/offload/io_bench.h"

namespace zoff::cli {
namespace {

struct BenchIoFlags {
  offload::IoBenchOptions bench;
  std::string backend = "auto";
  int repeats = 5;
  bool json = false;
};

struct Figures {
  double zoff_write = 0, fio_write = 0, zoff_read = 0, fio_read = 0;  // GB/s, best pass
};

bool on_path(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && access((dir + "/" + tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A fio pass that has not ended after this long is stuck (a hung device, a full disk that
// blocks): coreutils' `timeout` ends it (exit status 124) rather than let the bench hang.
// Generous: a 64 GiB file at 200 MB/s takes ~340 s.
constexpr int kFioTimeoutSeconds = 900;
constexpr int kTimeoutExitStatus = 124;

// One fio job with the tier's pattern: sequential, O_DIRECT, io_uring, the same block size,
// queue depth, file size and directory. Returns GB/s (1e9 bytes/s).
double run_fio(const offload::IoBenchOptions& o, const std::string& file, bool write) {
  const std::string rw = write ? "write" : "read";
  const std::string command =
      "timeout --kill-after=10 " + std::to_string(kFioTimeoutSeconds) +
      " fio --name=zoff_bench_io --filename=" + shell_quote(file) +
      " --size=" + std::to_string(o.file_bytes) + " --bs=" + std::to_string(o.aio.block_size) +
      " --iodepth=" + std::to_string(o.aio.queue_depth) +
      " --ioengine=io_uring --direct=1 --numjobs=1 --rw=" + rw + " --output-format=json 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ZOFF_CHECK(pipe != nullptr, "bench io: cannot run fio: ", std::strerror(errno));
  std::string out;
  char chunk[4096];
  for (size_t n; (n = fread(chunk, 1, sizeof chunk, pipe)) > 0;) out.append(chunk, n);
  const int status = pclose(pipe);
  ZOFF_CHECK(!WIFEXITED(status) || WEXITSTATUS(status) != kTimeoutExitStatus, "bench io: fio ", rw,
             " did not finish within ", kFioTimeoutSeconds, " s (--dir ", o.dir, ")");
  ZOFF_CHECK(status == 0, "bench io: fio ", rw, " failed (status ", status,
             "): ", out.substr(0, 300));
  // fio may print notes before its JSON object.
  const size_t brace = out.find('{');
  ZOFF_CHECK(brace != std::string::npos, "bench io: fio printed no JSON: ", out.substr(0, 300));
  const auto json = nlohmann::json::parse(out.substr(brace));
  const double bytes_per_s = json.at("jobs").at(0).at(rw).at("bw_bytes").get<double>();
  return bytes_per_s / 1e9;
}

// Alternates zoff and fio so both see the same machine state; keeps each one's best pass.
Figures measure(const BenchIoFlags& flags, std::string* io) {
  offload::IoBench tier_bench(flags.bench);
  *io = tier_bench.io_description();
  const std::string fio_file = flags.bench.dir + "/zoff_bench_io.fio.dat";
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove_fio_file{fio_file};
  Figures f;
  for (int r = 0; r < flags.repeats; ++r) {
    f.zoff_write = std::max(f.zoff_write, tier_bench.write_pass());
    f.fio_write = std::max(f.fio_write, run_fio(flags.bench, fio_file, true));
    f.zoff_read = std::max(f.zoff_read, tier_bench.read_pass());
    f.fio_read = std::max(f.fio_read, run_fio(flags.bench, fio_file, false));
  }
  return f;
}

void print_table(const BenchIoFlags& flags, const Figures& f, const std::string& io) {
  const auto& o = flags.bench;
  std::cout << "zoff bench io: " << o.dir << ", " << o.file_bytes << " bytes, blocks of "
            << o.aio.block_size << " bytes, queue depth " << o.aio.queue_depth << ", transfers of "
            << o.transfer_bytes << " bytes (" << io << ")\n";
  std::cout << std::fixed << std::setprecision(2);
  std::cout << "         zoff GB/s   fio GB/s   zoff / fio\n";
  std::cout << "write   " << std::setw(10) << f.zoff_write << std::setw(11) << f.fio_write
            << std::setw(12) << f.zoff_write / f.fio_write << "x\n";
  std::cout << "read    " << std::setw(10) << f.zoff_read << std::setw(11) << f.fio_read
            << std::setw(12) << f.zoff_read / f.fio_read << "x\n";
  std::cout << "(best of " << flags.repeats
            << " passes each, alternating; fio: ioengine=io_uring, direct=1, same bs, iodepth, "
               "size and directory)\n";
}

void print_json(const BenchIoFlags& flags, const Figures& f, const std::string& io) {
  const auto& o = flags.bench;
  nlohmann::json j = {
      {"dir", o.dir},
      {"file_bytes", o.file_bytes},
      {"block_size", o.aio.block_size},
      {"queue_depth", o.aio.queue_depth},
      {"transfer_bytes", o.transfer_bytes},
      {"repeats", flags.repeats},
      {"io", io},
      {"write",
       {{"zoff_gbps", f.zoff_write},
        {"fio_gbps", f.fio_write},
        {"ratio", f.zoff_write / f.fio_write}}},
      {"read",
       {{"zoff_gbps", f.zoff_read}, {"fio_gbps", f.fio_read}, {"ratio", f.zoff_read / f.fio_read}}},
  };
  std::cout << j.dump() << "\n";
}

void add_flags(CLI::App& cmd, BenchIoFlags& f) {
  const auto size = CLI::AsSizeValue(false);  // "2G", "64M", "1M": powers of 1024
  cmd.add_option("--dir", f.bench.dir, "directory of the tier file and fio's file")
      ->capture_default_str();
  cmd.add_option("--size", f.bench.file_bytes, "file bytes")
      ->transform(size)
      ->capture_default_str();
  cmd.add_option("--block-size", f.bench.aio.block_size, "bytes per request (aio.block_size)")
      ->transform(size)
      ->capture_default_str();
  cmd.add_option("--queue-depth", f.bench.aio.queue_depth, "requests in flight (aio.queue_depth)")
      ->capture_default_str();
  cmd.add_option("--transfer-size", f.bench.transfer_bytes, "bytes per swap transfer (sub-group)")
      ->transform(size)
      ->capture_default_str();
  cmd.add_option("--backend", f.backend, "auto | io_uring | threads")->capture_default_str();
  cmd.add_option("--threads", f.bench.aio.thread_count,
                 "pread/pwrite threads of the threads backend (aio.thread_count)")
      ->capture_default_str();
  cmd.add_option("--repeats", f.repeats, "passes of each; the best counts")->capture_default_str();
  cmd.add_flag("--json", f.json, "print one JSON object instead of the table");
}

}  // namespace

void add_bench_io(CLI::App& bench, int& exit_code) {
  auto flags = std::make_shared<BenchIoFlags>();
  auto* cmd = bench.add_subcommand(
      "io", "NVMe tier read/write GB/s for the swap pattern vs fio (io_uring, O_DIRECT)");
  add_flags(*cmd, *flags);
  cmd->callback([flags, &exit_code] {
    flags->bench.aio.backend = offload::parse_io_backend(flags->backend);
    ZOFF_CHECK_ARG(flags->repeats >= 1, "bench io: --repeats = ", flags->repeats, ": must be >= 1");
    offload::validate_io_bench_options(flags->bench);
    ZOFF_CHECK_ARG(on_path("fio"),
                   "bench io: fio not found on PATH (install Debian's fio; scripts/setup.sh does)");
    std::string io;
    const Figures figures = measure(*flags, &io);
    if (flags->json) {
      print_json(*flags, figures, io);
    } else {
      print_table(*flags, figures, io);
    }
    exit_code = 0;
  });
}

}  // namespace zoff::cli
