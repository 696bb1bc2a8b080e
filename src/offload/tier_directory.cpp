// The directory of an NVMe tier: checked, locked for one live owner, cleared of a dead run's files.
#include "tier_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <iostream>
#include <vector>

#include "io_error.h"
#include "zoff/core/error.h"

namespace zoff::offload {

namespace {

constexpr const char* kSwapSuffix = ".swp";
constexpr int kLockAttempts = 8;  // a lock file removed under us by its last owner is retried

bool all_of(const std::string& s, bool (*ok)(char)) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!ok(c)) return false;
  }
  return true;
}

bool region_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

// No '.' in owners: "<owner>.<region>.swp" then names exactly one owner, so cleaning up
// owner "a" can never remove the files of a live owner "a.b".
bool owner_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

bool same_file(int fd, const std::string& path) {
  struct stat by_fd {};
  struct stat by_path {};
  if (fstat(fd, &by_fd) != 0 || stat(path.c_str(), &by_path) != 0) return false;
  return by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino;
}

}  // namespace

bool is_region_name(const std::string& name) { return all_of(name, region_char); }
bool is_owner_name(const std::string& name) { return all_of(name, owner_char); }

TierDirectory::TierDirectory(std::string dir, std::string owner)
    : dir_(std::move(dir)), owner_(std::move(owner)) {
  ZOFF_CHECK_ARG(is_owner_name(owner_), "NVMe tier owner '", owner_,
                 "': must be a non-empty name of [A-Za-z0-9_-]");
  ZOFF_CHECK_ARG(!dir_.empty(), "NVMe tier directory (nvme_path) is empty");
  lock_path_ = dir_ + "/" + owner_ + ".lock";
  prepare_dir();
  acquire_lock();
  remove_stale_files();
}

TierDirectory::~TierDirectory() {
  if (lock_fd_ < 0) return;
  // Removed while still held, so a newcomer either fails on our lock or makes a new file.
  unlink(lock_path_.c_str());
  close(lock_fd_);
}

std::string TierDirectory::file_path(const std::string& region) const {
  return dir_ + "/" + owner_ + "." + region + kSwapSuffix;
}

void TierDirectory::prepare_dir() const {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  struct stat st {};
  ZOFF_CHECK_ARG(stat(dir_.c_str(), &st) == 0, "NVMe tier directory (nvme_path) '", dir_,
                 "' cannot be created: ", ec ? ec.message() : errno_text(errno));
  ZOFF_CHECK_ARG(S_ISDIR(st.st_mode), "NVMe tier directory (nvme_path) '", dir_,
                 "' is not a directory");
  ZOFF_CHECK_ARG(access(dir_.c_str(), W_OK | X_OK) == 0, "NVMe tier directory (nvme_path) '", dir_,
                 "' is not writable: ", errno_text(errno));
}

void TierDirectory::acquire_lock() {
  for (int attempt = 0; attempt < kLockAttempts; ++attempt) {
    // The O_DIRECT probe rides on the lock file: the same filesystem as the tier's files.
    int fd = open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) {
      direct_supported_ = false;
      fd = open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    }
    // Root passes access() on a read-only filesystem; creating the lock file tells.
    ZOFF_CHECK_ARG(fd >= 0, "NVMe tier directory (nvme_path) '", dir_,
                   "' is not writable: cannot create ", lock_path_, ": ", errno_text(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      close(fd);
      ZOFF_CHECK_ARG(err != EWOULDBLOCK, "NVMe tier lock ", lock_path_,
                     " is held by another live run (owner '", owner_,
                     "'): two runs cannot share one nvme_path and rank");
      throw_errno("flock", lock_path_, err);
    }
    if (same_file(fd, lock_path_)) {
      lock_fd_ = fd;
      return;
    }
    close(fd);  // the previous owner removed the file between our open and flock
  }
  throw Error("NVMe tier lock " + lock_path_ + ": could not be acquired (the file kept changing)");
}

void TierDirectory::remove_stale_files() const {
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) throw_errno("opendir", dir_, errno);
  const std::string prefix = owner_ + ".";
  const size_t suffix_len = std::char_traits<char>::length(kSwapSuffix);
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() + suffix_len || name.rfind(prefix, 0) != 0) continue;
    if (name.compare(name.size() - suffix_len, suffix_len, kSwapSuffix) != 0) continue;
    const std::string region = name.substr(prefix.size(), name.size() - prefix.size() - suffix_len);
    if (is_region_name(region)) stale.push_back(name);
  }
  closedir(d);
  if (stale.empty()) return;
  for (const auto& name : stale) {
    const std::string path = dir_ + "/" + name;
    if (unlink(path.c_str()) != 0 && errno != ENOENT) throw_errno("remove stale file", path, errno);
  }
  std::cerr << "zoff: warning: removed " << stale.size() << " stale NVMe tier file(s) " << prefix
            << "*" << kSwapSuffix << " of a dead run from " << dir_ << " (never reused)\n";
}

}  // namespace zoff::offload
