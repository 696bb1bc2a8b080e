// Error types at the library boundary and the check macros that raise them.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace zoff {

// Something went wrong inside zoff or its environment (I/O, a peer died, a timeout).
// The CLI prints it on one line and exits 1.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The user gave zoff something it cannot use: a config value, a path, a size, a world
// layout. The message names the bad value. The CLI prints it on one line and exits 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace zoff

// ZOFF_CHECK(cond, "message parts", value, ...): throws zoff::Error when cond is false.
#define ZOFF_CHECK(cond, ...)                                   \
  do {                                                          \
    if (!(cond)) {                                              \
      throw ::zoff::Error(::zoff::detail::concat(__VA_ARGS__)); \
    }                                                           \
  } while (0)

// ZOFF_CHECK_ARG(cond, ...): like ZOFF_CHECK for user input; throws zoff::UsageError.
#define ZOFF_CHECK_ARG(cond, ...)                                    \
  do {                                                               \
    if (!(cond)) {                                                   \
      throw ::zoff::UsageError(::zoff::detail::concat(__VA_ARGS__)); \
    }                                                                \
  } while (0)
