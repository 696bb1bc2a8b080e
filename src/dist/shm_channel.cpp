// ShmChannel: futex-timed rounds on a SharedSegment mapped by every rank of a host.
#include "shm_channel.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "zoff/core/error.h"
#include "zoff/core/round_up.h"

namespace zoff::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kLine = 64;         // bytes: one cache line per rank's counters
constexpr size_t kSlotAlign = 4096;  // bytes: slots start on a page
constexpr int kSpins = 64;           // polls before sleeping: a peer is often microseconds away
constexpr auto kSleepSlice = std::chrono::milliseconds(50);  // between liveness checks

static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be plain words");

size_t slots_offset(int size) {
  return round_up(kLine + kLine * static_cast<size_t>(size), kSlotAlign);
}

size_t segment_bytes(int size, int64_t slot_bytes) {
  return slots_offset(size) + 2 * static_cast<size_t>(size) * static_cast<size_t>(slot_bytes);
}

// Sleeps while *word == expected, for at most `slice`. Shared (not private) futex: the word
// lives in memory mapped by several processes.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, std::chrono::nanoseconds slice) {
  timespec relative{};
  relative.tv_sec = static_cast<time_t>(slice.count() / 1000000000);
  relative.tv_nsec = static_cast<long>(slice.count() % 1000000000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT, expected, &relative, nullptr,
          0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Counters wrap after 2^32 rounds; comparing the signed difference keeps the order right.
bool reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

}  // namespace

struct ShmChannel::Header {
  int64_t size;
  int64_t slot_bytes;
};

struct alignas(kLine) ShmChannel::PeerLine {
  std::atomic<uint32_t> ready;  // the last round whose slot this rank filled
  std::atomic<uint32_t> done;   // the last round this rank finished reading
  std::atomic<int32_t> pid;
};

ShmChannel::ShmChannel(SharedSegment segment, int rank, int size, int64_t slot_bytes)
    : segment_(std::move(segment)),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      read_slots_(static_cast<size_t>(size)) {}

ShmChannel::ShmChannel(ShmChannel&& other) noexcept = default;
ShmChannel::~ShmChannel() = default;

ShmChannel ShmChannel::create(int size, int64_t slot_bytes) {
  ShmChannel channel(SharedSegment::create(segment_bytes(size, slot_bytes)), 0, size, slot_bytes);
  channel.header() = Header{size, slot_bytes};  // the counters start zero-filled
  return channel;
}

ShmChannel ShmChannel::open(const std::string& name, int rank, int size, int64_t slot_bytes,
                            uint64_t nonce) {
  ShmChannel channel(SharedSegment::open(name, segment_bytes(size, slot_bytes), nonce), rank, size,
                     slot_bytes);
  const Header& h = channel.header();
  ZOFF_CHECK(h.size == size && h.slot_bytes == slot_bytes, "shared memory ", name,
             " was made for another world (", h.size, " ranks, slots of ", h.slot_bytes, " bytes)");
  return channel;
}

ShmChannel::Header& ShmChannel::header() const {
  return *reinterpret_cast<Header*>(segment_.data());
}

ShmChannel::PeerLine& ShmChannel::peer(int r) const {
  return *reinterpret_cast<PeerLine*>(segment_.data() + kLine * (1 + r));
}

std::byte* ShmChannel::slot(uint32_t bank, int r) const {
  const size_t index = static_cast<size_t>(bank) * static_cast<size_t>(size_) + r;
  return segment_.data() + slots_offset(size_) + index * static_cast<size_t>(slot_bytes_);
}

void ShmChannel::announce(int rank) {
  rank_ = rank;
  peer(rank).pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
}

void ShmChannel::check_peers() {
  trust_pids_ = true;
  for (int r = 0; r < size_; ++r) {
    const pid_t pid = peer(r).pid.load(std::memory_order_acquire);
    // A pid we cannot see is another pid namespace: fall back to the timeout alone.
    if (pid <= 0 || (kill(pid, 0) != 0 && errno == ESRCH)) trust_pids_ = false;
  }
}

void ShmChannel::wait_for(std::atomic<uint32_t>& counter, uint32_t target, int peer_rank,
                          const char* op, const char* what, std::chrono::milliseconds timeout,
                          const std::function<bool()>& should_stop) const {
  for (int i = 0; i < kSpins; ++i) {
    if (reached(counter.load(std::memory_order_acquire), target)) return;
  }
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const uint32_t seen = counter.load(std::memory_order_acquire);
    if (reached(seen, target)) return;
    const auto now = Clock::now();
    const auto context = [&] {
      return detail::concat(op, " (shm, rank ", rank_, " of ", size_, ")");
    };
    ZOFF_CHECK(now < deadline, context(), " timed out after ", timeout.count(),
               " ms waiting for rank ", peer_rank, " to ", what,
               " (a peer stopped or never called it)");
    ZOFF_CHECK(!should_stop(), context(), " was abandoned: the communicator is shutting down");
    if (trust_pids_) {
      const pid_t pid = peer(peer_rank).pid.load(std::memory_order_relaxed);
      ZOFF_CHECK(!(kill(pid, 0) != 0 && errno == ESRCH), context(), " failed: rank ", peer_rank,
                 " (pid ", pid, ") has exited");
    }
    futex_wait(counter, seen, std::min<std::chrono::nanoseconds>(kSleepSlice, deadline - now));
  }
}

void ShmChannel::round(const char* op, const Fill& fill, const Read& read,
                       std::chrono::milliseconds timeout,
                       const std::function<bool()>& should_stop) {
  const uint64_t count = round_ + 1;
  const auto s = static_cast<uint32_t>(count);  // the counters hold the low 32 bits
  const uint32_t bank = s & 1u;
  if (count > 2) {
    for (int r = 0; r < size_; ++r) {
      wait_for(peer(r).done, s - 2, r, op, "finish reading the previous round", timeout,
               should_stop);
    }
  }
  if (fill) fill(slot(bank, rank_));
  PeerLine& me = peer(rank_);
  me.ready.store(s, std::memory_order_release);
  futex_wake_all(me.ready);
  for (int r = 0; r < size_; ++r) {
    wait_for(peer(r).ready, s, r, op, "fill its slot", timeout, should_stop);
    read_slots_[static_cast<size_t>(r)] = slot(bank, r);
  }
  if (read) read(read_slots_);
  me.done.store(s, std::memory_order_release);
  futex_wake_all(me.done);
  round_ = count;
}

}  // namespace zoff::dist
