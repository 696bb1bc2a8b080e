// pick_free_port: try random ports below the kernel's ephemeral range until some bind.
#include "zoff/dist/free_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::dist {
namespace {

// Lowest port we draw from: below it are the registered services people run by hand.
constexpr int kLowestPort = 10000;
// How many random candidates to try before giving up (each is a bind() or two).
constexpr int kAttempts = 200;

// The first port of the kernel's ephemeral range, 32768 (Linux's default) if unreadable.
int ephemeral_range_start() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (in >> low >> high && low > 0) return low;
  return 32768;
}

// A TCP socket bound to `port` on all IPv4 interfaces (port 0: the kernel chooses), or -1.
int bind_port(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ZOFF_CHECK(fd >= 0, "pick_free_port: socket() failed: ", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) return fd;
  close(fd);
  return -1;
}

// True when ports first .. first + count - 1 can all be bound right now.
bool ports_free(int first, int count) {
  std::vector<int> fds;
  for (int p = first; p < first + count; ++p) {
    const int fd = bind_port(p);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  const bool all = static_cast<int>(fds.size()) == count;
  for (int fd : fds) close(fd);
  return all;
}

// The kernel's choice of one free port.
int kernel_chosen_port() {
  const int fd = bind_port(0);
  ZOFF_CHECK(fd >= 0, "pick_free_port: could not bind a port: ", std::strerror(errno));
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  const bool ok = getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int saved_errno = errno;
  close(fd);
  ZOFF_CHECK(ok, "pick_free_port: getsockname() failed: ", std::strerror(saved_errno));
  return ntohs(address.sin_port);
}

}  // namespace

int pick_free_port(int count) {
  ZOFF_CHECK_ARG(count >= 1 && count <= 16, "pick_free_port: count ", count, " must be in [1, 16]");
  const int highest_first = ephemeral_range_start() - count;
  if (highest_first - kLowestPort < 1000) {
    ZOFF_CHECK(count == 1, "pick_free_port: the ephemeral port range starts at ",
               ephemeral_range_start(), ", leaving no room for ", count, " ports below it");
    return kernel_chosen_port();
  }
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> first_port(kLowestPort, highest_first);
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const int first = first_port(random);
    if (ports_free(first, count)) return first;
  }
  throw Error(detail::concat("pick_free_port: no ", count, " consecutive free ports in ",
                             kLowestPort, "..", highest_first + count - 1, " after ", kAttempts,
                             " tries"));
}

}  // namespace zoff::dist
