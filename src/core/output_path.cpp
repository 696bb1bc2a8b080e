// check_output_path: refuse to replace anything but a regular file (see output_path.h).
#include "zoff/core/output_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "zoff/core/error.h"

namespace zoff {
namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void check_replaceable(const std::string& what, const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    ZOFF_CHECK_ARG(S_ISREG(st.st_mode), what, " ", path, ": is ", kind_of(st.st_mode),
                   "; zoff only replaces regular files");
  } else {
    ZOFF_CHECK_ARG(errno == ENOENT, what, " ", path, ": ", std::strerror(errno));
  }
}

void check_output_path(const std::string& flag, const std::string& path) {
  ZOFF_CHECK_ARG(!path.empty(), flag, ": the path is empty");
  check_replaceable(flag, path);
  const auto parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  std::error_code ec;
  ZOFF_CHECK_ARG(std::filesystem::is_directory(dir, ec), flag, " ", path, ": directory ", dir,
                 " does not exist");
  ZOFF_CHECK_ARG(::access(dir.c_str(), W_OK) == 0, flag, " ", path, ": directory ", dir,
                 " is not writable: ", std::strerror(errno));
}

}  // namespace zoff
