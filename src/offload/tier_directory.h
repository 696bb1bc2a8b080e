// The directory of an NVMe tier: checked, locked for one live owner, cleared of a dead run's files.
#pragma once

#include <string>

namespace zoff::offload {

class TierDirectory {
 public:
  // Creates `dir` if missing; throws zoff::UsageError naming it when it is not a directory
  // or not writable, and when another live process (or tier) holds `<dir>/<owner>.lock`.
  // Then removes `<owner>.<region>.swp` files a killed run left (one warning line); no
  // other file is touched. Probes O_DIRECT on the lock file (direct_supported()).
  TierDirectory(std::string dir, std::string owner);
  ~TierDirectory();  // removes the lock file and releases the lock
  TierDirectory(const TierDirectory&) = delete;
  TierDirectory& operator=(const TierDirectory&) = delete;

  const std::string& dir() const { return dir_; }
  std::string file_path(const std::string& region) const;  // <dir>/<owner>.<region>.swp
  bool direct_supported() const { return direct_supported_; }

 private:
  void prepare_dir() const;
  void acquire_lock();
  void remove_stale_files() const;

  std::string dir_;
  std::string owner_;
  std::string lock_path_;
  int lock_fd_ = -1;
  bool direct_supported_ = true;
};

// [a-z0-9_.]+ (region names) and [A-Za-z0-9_-]+ (owners): names that are safe in a path.
bool is_region_name(const std::string& name);
bool is_owner_name(const std::string& name);

}  // namespace zoff::offload
