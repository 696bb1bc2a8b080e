// Heartbeat: per rank, a thread that beats through a store client of its own (rank 0's also reads
// everyone's beats) and a thread that notices when the store itself stops answering.
#include "zoff/dist/heartbeat.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "exception_first_line.h"
#include "zoff/core/error.h"

namespace zoff::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kMinConnectTimeout{5000};  // see the constructor

std::string beat_key(int rank) { return detail::concat("zoff/heartbeat/", rank); }
std::string done_key(int rank) { return detail::concat("zoff/heartbeat_done/", rank); }
// The address each rank reaches the store from, for messages that name a lost host.
std::string host_key(int rank) { return detail::concat("zoff/heartbeat_host/", rank); }

// "30", "0.5": the timeout in seconds for messages.
std::string seconds_text(std::chrono::milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(t.count()) / 1000.0);
  return text;
}

}  // namespace

struct Heartbeat::State {
  WorldInfo world;
  HeartbeatOptions options;
  std::chrono::milliseconds interval{0};  // between beats
  c10::intrusive_ptr<::c10d::TCPStore> store;

  std::mutex mutex;  // guards everything below
  std::condition_variable wake;
  bool stop = false;        // the Heartbeat is being destroyed
  bool store_gone = false;  // the store closed the connection (rank 0 has ended)
  Clock::time_point store_gone_at;
  bool beater_finished = false;   // beat_loop returned
  bool fired = false;             // a silence was reported (once)
  Clock::time_point last_answer;  // when the store last answered a whole round
  // Rank 0: each rank's last heartbeat count and when it last moved.
  std::vector<int64_t> counts;
  std::vector<Clock::time_point> moved;

  // Ranks on several hosts: no launcher sees every rank, so a rank whose store closed while
  // it still runs must end itself (on one host the launcher stops it when rank 0 ends).
  bool several_hosts() const { return world.local_world_size < world.world_size; }

  std::string store_silence() const {
    return detail::concat("rank 0 (host of the rendezvous store at ", world.master_addr, ":",
                          world.master_port, ") did not answer for ", seconds_text(options.timeout),
                          " s (stopped, wedged or cut off?)");
  }

  std::string store_closed() const {
    return detail::concat("rank 0 (host of the rendezvous store at ", world.master_addr, ":",
                          world.master_port, ") ended the job: its store closed ",
                          seconds_text(options.timeout), " s ago while this rank still runs");
  }

  // " (on 10.77.1.2)": where rank r said it runs, or "" when it never said or the store
  // cannot say now.
  std::string where(int r) {
    try {
      if (!store->check({host_key(r)})) return "";
      const std::string address = store->get_to_str(host_key(r));
      return address.empty() ? "" : detail::concat(" (on ", address, ")");
    } catch (const std::exception&) {
      return "";
    }
  }

  // Reports `message` once, unless the Heartbeat is already stopping.
  void fire(const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (fired || stop) return;
      fired = true;
    }
    if (options.on_silence) {
      options.on_silence(message);
      return;
    }
    std::fflush(stdout);
    std::fprintf(stderr, "zoff: error: %s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }

  // Rank 0: reads every other rank's count (store calls; they may throw). Returns the message
  // naming the first rank silent for the timeout that has not finished, or "".
  std::string silent_rank() {
    const auto now = Clock::now();
    for (int r = 1; r < world.world_size; ++r) {
      const int64_t count = store->add(beat_key(r), 0);
      if (count != counts[r]) {
        counts[r] = count;
        moved[r] = now;
        continue;
      }
      if (now - moved[r] < options.timeout || store->add(done_key(r), 0) > 0) continue;
      return detail::concat("rank ", r, where(r), " sent no heartbeat for ",
                            seconds_text(options.timeout), " s (stopped, wedged or cut off?)");
    }
    return "";
  }

  // One round: beat, and on rank 0 read the others. Returns a silence to report, or "";
  // sets store_gone when the store closed the connection.
  std::string round() {
    const auto started = Clock::now();
    try {
      store->add(beat_key(world.rank), 1);
      return world.rank == 0 ? silent_rank() : "";
    } catch (const std::exception&) {
      // A call that failed only after the timeout is a store that stopped answering; one that
      // failed at once is a closed connection: rank 0 has ended (on one host the launcher
      // sees how; on several, watch_store_loop ends this rank if it still runs later). c10d's
      // client does not reconnect, so a reset connection is as final as a closed one.
      if (Clock::now() - started >= options.timeout) return store_silence();
      std::lock_guard<std::mutex> lock(mutex);
      store_gone = true;
      store_gone_at = Clock::now();
      return "";
    }
  }

  void beat_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop && !store_gone && !fired) {
      lock.unlock();
      const std::string silence = round();
      if (!silence.empty()) fire(silence);
      lock.lock();
      if (store_gone || fired) break;
      last_answer = Clock::now();
      wake.wait_for(lock, interval, [&] { return stop; });
    }
    if (stop && !store_gone) {
      lock.unlock();
      try {
        store->add(done_key(world.rank), 1);  // finished: silence from now on is not a fault
      } catch (const std::exception&) {
      }
      lock.lock();
    }
    beater_finished = true;
    wake.notify_all();
  }

  // Ranks != 0: a store call that hangs (rank 0 stopped, its store with it) blocks the
  // beater, so this thread watches the time of the last answered round. On several hosts it
  // also ends a rank that still runs `timeout` after the store closed: rank 0 ended the job
  // (a peer it lost, or its own failure), and this rank may wait in a collective with a host
  // that is gone for the whole collective timeout otherwise.
  void watch_store_loop() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      wake.wait_for(lock, interval, [&] { return stop || fired; });
      if (stop || fired) return;
      if (store_gone) {
        if (!several_hosts()) return;
        if (Clock::now() - store_gone_at < options.timeout) continue;
        lock.unlock();
        fire(store_closed());
        return;
      }
      if (beater_finished) return;
      if (Clock::now() - last_answer >= options.timeout) {
        lock.unlock();
        fire(store_silence());
        return;
      }
    }
  }
};

Heartbeat::Heartbeat(const WorldInfo& world, HeartbeatOptions options)
    : state_(std::make_shared<State>()) {
  ZOFF_CHECK_ARG(options.timeout.count() >= 1, "heartbeat timeout ", options.timeout.count(),
                 " ms: must be >= 1 ms");
  State& s = *state_;
  s.world = world;
  s.options = std::move(options);
  s.interval = std::clamp(s.options.timeout / 5, std::chrono::milliseconds(50),
                          std::chrono::milliseconds(5000));
  ::c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(world.master_port);
  store_options.isServer = false;
  store_options.waitWorkers = false;
  // c10d counts the connect timeout in whole seconds: under 1 s it would not even try.
  store_options.timeout =
      std::max<std::chrono::milliseconds>(s.options.timeout, kMinConnectTimeout);
  try {
    s.store = c10::make_intrusive<::c10d::TCPStore>(world.master_addr, store_options);
  } catch (const std::exception& e) {
    throw Error(detail::concat("heartbeat: rank ", world.rank, " cannot reach the store at ",
                               world.master_addr, ":", world.master_port, " within ",
                               store_options.timeout.count(), " ms (", first_line(e), ")"));
  }
  try {
    const std::string address = local_address_towards(world.master_addr, world.master_port);
    s.store->set(host_key(world.rank), std::vector<uint8_t>(address.begin(), address.end()));
  } catch (const std::exception&) {
    // Only messages use it: a rank that could not say where it runs is named without it.
  }
  s.counts.assign(static_cast<size_t>(world.world_size), -1);
  s.moved.assign(static_cast<size_t>(world.world_size), Clock::now());
  s.last_answer = Clock::now();
  beater_ = std::thread([state = state_] { state->beat_loop(); });
  if (world.rank != 0)
    store_watcher_ = std::thread([state = state_] { state->watch_store_loop(); });
}

Heartbeat::~Heartbeat() {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mutex);
  s.stop = true;
  s.wake.notify_all();
  // A store call in flight returns within a round trip unless the store stopped answering:
  // then the beater is left behind (it owns its share of the state).
  const bool finished = s.wake.wait_for(lock, s.interval + std::chrono::seconds(2),
                                        [&] { return s.beater_finished; });
  lock.unlock();
  if (finished) {
    beater_.join();
  } else {
    beater_.detach();
  }
  if (store_watcher_.joinable()) store_watcher_.join();
}

}  // namespace zoff::dist
