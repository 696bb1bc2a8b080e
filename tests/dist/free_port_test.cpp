// pick_free_port: ports below the kernel's ephemeral range that really are free, and bad counts.
#include "zoff/dist/free_port.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

#include "zoff/core/error.h"

namespace zoff::dist::free_port_test {
namespace {

int ephemeral_start() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768, high = 60999;
  in >> low >> high;
  return low;
}

// Listens on `port` (all IPv4 interfaces); -1 if it cannot.
int listen_on(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 1) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(PickFreePort, TwoConsecutivePortsBelowTheEphemeralRangeThatCanBeListenedOn) {
  for (int round = 0; round < 20; ++round) {
    const int port = pick_free_port(2);
    ASSERT_GE(port, 1024);
    ASSERT_LT(port + 1, ephemeral_start()) << "port " << port;
    const int a = listen_on(port), b = listen_on(port + 1);
    EXPECT_GE(a, 0) << "port " << port;
    EXPECT_GE(b, 0) << "port " << port + 1;
    if (a >= 0) close(a);
    if (b >= 0) close(b);
  }
}

TEST(PickFreePort, NeverReturnsAPortSomeoneListensOn) {
  // Occupy one port of every pair it returns, then ask again: the next answer must differ
  // from every occupied port (a bind-checked pick, not a guess).
  std::vector<int> held;
  for (int round = 0; round < 20; ++round) {
    const int port = pick_free_port(2);
    for (int fd : held) {
      sockaddr_in a{};
      socklen_t n = sizeof(a);
      ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n), 0);
      const int taken = ntohs(a.sin_port);
      EXPECT_NE(port, taken);
      EXPECT_NE(port + 1, taken);
    }
    const int fd = listen_on(port + 1);
    ASSERT_GE(fd, 0);
    held.push_back(fd);
  }
  for (int fd : held) close(fd);
}

TEST(PickFreePort, ACountOutsideOneToSixteenIsRefused) {
  EXPECT_THROW(pick_free_port(0), UsageError);
  EXPECT_THROW(pick_free_port(17), UsageError);
}

}  // namespace
}  // namespace zoff::dist::free_port_test
