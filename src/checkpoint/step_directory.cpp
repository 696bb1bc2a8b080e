// Staging and swapping checkpoint step directories (see step_directory.h), and the save
// fault seam.
#include "zoff/checkpoint/step_directory.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <regex>

#include "zoff/checkpoint/atomic_file.h"
#include "zoff/core/error.h"

namespace zoff::checkpoint {
namespace {

namespace fs = std::filesystem;

std::mutex& hook_mutex() {
  static std::mutex m;
  return m;
}

SaveFaultHook& hook() {
  static SaveFaultHook h;
  return h;
}

void rename_or_throw(const std::string& from, const std::string& to, const std::string& why) {
  ZOFF_CHECK(std::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from, " to ", to, " (",
             why, "): ", std::strerror(errno));
}

}  // namespace

std::string step_dir_name(int64_t step) { return "step_" + std::to_string(step); }
std::string staging_dir_name(int64_t step) { return step_dir_name(step) + ".tmp"; }

int remove_save_leftovers(const std::string& root) {
  static const std::regex leftover(R"(step_[0-9]+(\.old)?\.tmp|latest\.tmp)");
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return 0;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!std::regex_match(entry.path().filename().string(), leftover)) continue;
    fs::remove_all(entry.path(), ec);
    ZOFF_CHECK(!ec, "cannot remove the leftover of an earlier save ", entry.path().string(), ": ",
               ec.message());
    ++removed;
  }
  if (removed > 0) fsync_directory(root);
  return removed;
}

void swap_in_step(const std::string& staged, const std::string& dir, const std::string& root) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    rename_or_throw(staged, dir, "committing the checkpoint");
    fsync_directory(root);
    return;
  }
  if (renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_directory(root);
    fs::remove_all(staged, ec);  // the old step; a failure here leaves a leftover, not damage
    return;
  }
  ZOFF_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "cannot exchange ", staged,
             " and ", dir, ": ", std::strerror(errno));
  // No atomic exchange on this file system: old aside, new in, old removed.
  const std::string old = dir + ".old.tmp";
  fs::remove_all(old, ec);
  rename_or_throw(dir, old, "moving the old checkpoint aside");
  rename_or_throw(staged, dir, "committing the checkpoint; the previous one is in " + old);
  fsync_directory(root);
  fs::remove_all(old, ec);
}

void set_save_fault_hook(SaveFaultHook h) {
  std::lock_guard<std::mutex> lock(hook_mutex());
  hook() = std::move(h);
}

void run_save_fault_hook(int rank, const std::string& path) {
  SaveFaultHook h;
  {
    std::lock_guard<std::mutex> lock(hook_mutex());
    h = hook();
  }
  if (h) h(rank, path);
}

}  // namespace zoff::checkpoint
