// ShmComm: the collectives as rounds on a ShmChannel, run in issue order by a SerialWorker.
#include "zoff/dist/shm_comm.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>

#include "collective_checks.h"
#include "completed_work.h"
#include "serial_worker.h"
#include "shared_segment.h"
#include "shm_channel.h"
#include "zoff/core/error.h"

namespace zoff::dist {
namespace {

constexpr int64_t kNameBytes = 120;  // rank 0's announcement: the segment's name, then a nonce

std::byte* bytes(const torch::Tensor& t) { return static_cast<std::byte*>(t.data_ptr()); }

torch::Tensor row(const std::byte* slot, int64_t numel, torch::ScalarType dtype) {
  return torch::from_blob(const_cast<std::byte*>(slot), {numel},
                          torch::TensorOptions().dtype(dtype));
}

// Rank 0 makes the mapping with create() and tells the others its name and nonce; they
// open(name, nonce) it. Returns this rank's mapping, or nothing with the reason this rank has.
// Mapped is a ShmChannel or a SharedSegment (both have name() and nonce()).
template <class Mapped, class Create, class Open>
std::optional<Mapped> map_on_every_rank(Comm& comm, const Create& create, const Open& open,
                                        std::string* reason) {
  const int rank = comm.rank();
  auto message = torch::zeros({kNameBytes + 8}, torch::kByte);
  std::optional<Mapped> mapped;
  if (rank == 0) {
    try {
      mapped.emplace(create());
      std::memcpy(bytes(message), mapped->name().data(),
                  std::min<size_t>(mapped->name().size(), kNameBytes - 1));
      const uint64_t nonce = mapped->nonce();
      std::memcpy(bytes(message) + kNameBytes, &nonce, sizeof(nonce));
    } catch (const Error& e) {
      *reason = e.what();
    }
  }
  comm.broadcast(message, 0)->wait();
  if (rank != 0) {
    const std::string name(reinterpret_cast<const char*>(bytes(message)));
    uint64_t nonce = 0;
    std::memcpy(&nonce, bytes(message) + kNameBytes, sizeof(nonce));
    if (name.empty()) {
      *reason = "rank 0 could not create its shared memory";
    } else {
      try {
        mapped.emplace(open(name, nonce));
      } catch (const Error& e) {
        *reason = e.what();
      }
    }
  }
  return mapped;
}

// Whether every rank mapped the segment (a collective: all ranks learn the same answer).
// If not, *why_not (may be null) gets this rank's reason, or that another rank failed.
bool all_mapped(Comm& comm, bool mine, const std::string& reason, std::string* why_not) {
  auto votes = torch::tensor({mine ? 1 : 0}, torch::kInt);
  comm.all_reduce_sum(votes)->wait();
  if (votes.item<int>() == comm.size()) return true;
  if (why_not != nullptr) {
    *why_not = reason.empty() ? "another rank could not map rank 0's shared memory" : reason;
  }
  return false;
}

}  // namespace

struct ShmComm::State {
  State(CommPtr bootstrap, ShmChannel channel, std::chrono::milliseconds timeout)
      : bootstrap(std::move(bootstrap)), channel(std::move(channel)), timeout(timeout) {}

  void round(const char* op, const ShmChannel::Fill& fill, const ShmChannel::Read& read) {
    channel.round(op, fill, read, timeout, [this] { return worker.stopping(); });
  }

  CommPtr bootstrap;
  ShmChannel channel;
  std::chrono::milliseconds timeout;
  SerialWorker worker;  // last: joined before the channel is unmapped
};

std::shared_ptr<ShmComm> ShmComm::connect(CommPtr bootstrap, std::chrono::milliseconds timeout,
                                          int64_t slot_bytes, std::string* why_not) {
  ZOFF_CHECK_ARG(slot_bytes > 0 && slot_bytes % 64 == 0, "shared-memory slot of ", slot_bytes,
                 " bytes: must be a positive multiple of 64");
  ZOFF_CHECK_ARG(bootstrap != nullptr, "ShmComm::connect needs a bootstrap communicator");
  std::string reason;
  const int size = bootstrap->size();
  const int rank = bootstrap->rank();
  auto channel = map_on_every_rank<ShmChannel>(
      *bootstrap, [&] { return ShmChannel::create(size, slot_bytes); },
      [&](const std::string& name, uint64_t nonce) {
        return ShmChannel::open(name, rank, size, slot_bytes, nonce);
      },
      &reason);
  if (channel) channel->announce(rank);
  // The vote's all-reduce also orders every rank's pid before check_peers reads them.
  if (!all_mapped(*bootstrap, channel.has_value(), reason, why_not)) {
    return nullptr;  // the channel's destructor unmaps, and on rank 0 removes the name
  }
  channel->check_peers();
  if (bootstrap->rank() == 0) channel->unlink();  // every rank has it mapped: nothing can leak
  auto state = std::make_unique<State>(std::move(bootstrap), std::move(*channel), timeout);
  return std::shared_ptr<ShmComm>(new ShmComm(std::move(state)));
}

ShmComm::ShmComm(std::unique_ptr<State> state)
    : state_(std::move(state)),
      rank_(state_->bootstrap->rank()),
      size_(state_->bootstrap->size()) {}

ShmComm::~ShmComm() = default;

WorkPtr ShmComm::submit(const char* op, std::function<void(const char*)> job) {
  return state_->worker.submit([op, job = std::move(job)] { job(op); });
}

WorkPtr ShmComm::all_reduce_sum(torch::Tensor tensor) {
  auto flat = flat_view(tensor, "all_reduce_sum", "tensor");
  check_reducible(flat.scalar_type(), "all_reduce_sum");
  if (flat.numel() == 0) return std::make_shared<CompletedWork>();
  State* s = state_.get();
  return submit("all_reduce_sum", [s, flat](const char* op) {
    const int64_t element = static_cast<int64_t>(flat.element_size());
    const int64_t per_round = s->channel.slot_bytes() / element;
    for (int64_t lo = 0; lo < flat.numel(); lo += per_round) {
      const int64_t count = std::min(per_round, flat.numel() - lo);
      auto part = flat.narrow(0, lo, count);
      s->round(
          op, [&](std::byte* mine) { std::memcpy(mine, bytes(part), count * element); },
          [&](const std::vector<const std::byte*>& slots) {
            std::vector<torch::Tensor> rows;
            for (const auto* slot : slots) rows.push_back(row(slot, count, flat.scalar_type()));
            sum_rows_in_order(rows, part);
          });
    }
  });
}

WorkPtr ShmComm::reduce_scatter_sum(torch::Tensor input, torch::Tensor output) {
  auto in = flat_view(input, "reduce_scatter_sum", "input");
  auto out = flat_view(output, "reduce_scatter_sum", "output");
  check_reduce_scatter(in, out, size_);
  if (out.numel() == 0) return std::make_shared<CompletedWork>();
  return reduce_scatter_sum_v(in, std::vector<int64_t>(size_, out.numel()), out);
}

WorkPtr ShmComm::reduce_scatter_sum_v(torch::Tensor input, std::vector<int64_t> split_sizes,
                                      torch::Tensor output) {
  auto in = flat_view(input, "reduce_scatter_sum_v", "input");
  auto out = flat_view(output, "reduce_scatter_sum_v", "output");
  check_reduce_scatter_v(in, split_sizes, out, size_, rank_);
  const int64_t longest = *std::max_element(split_sizes.begin(), split_sizes.end());
  if (longest == 0) return std::make_shared<CompletedWork>();
  State* s = state_.get();
  const int me = rank_;
  const int size = size_;
  return submit("reduce_scatter_sum",
                [s, in, out, splits = std::move(split_sizes), longest, me, size](const char* op) {
                  const int64_t element = static_cast<int64_t>(in.element_size());
                  // Each round carries up to `per_piece` elements of every piece: piece p at p *
                  // per_piece.
                  const int64_t per_piece = s->channel.slot_bytes() / (size * element);
                  std::vector<int64_t> starts(splits.size(), 0);
                  for (size_t p = 1; p < splits.size(); ++p)
                    starts[p] = starts[p - 1] + splits[p - 1];
                  const auto count_at = [&](int p, int64_t lo) {
                    return std::clamp<int64_t>(splits[static_cast<size_t>(p)] - lo, 0, per_piece);
                  };
                  const auto piece_at = [&](int p, int64_t lo) -> const std::byte* {
                    return bytes(in) + (starts[static_cast<size_t>(p)] + lo) * element;
                  };
                  for (int64_t lo = 0; lo < longest; lo += per_piece) {
                    s->round(
                        op,
                        [&](std::byte* mine) {
                          for (int p = 0; p < size; ++p) {
                            if (p == me)
                              continue;  // my own piece is read from my input, not copied
                            std::memcpy(mine + p * per_piece * element, piece_at(p, lo),
                                        count_at(p, lo) * element);
                          }
                        },
                        [&](const std::vector<const std::byte*>& slots) {
                          const int64_t count = count_at(me, lo);
                          if (count == 0) return;
                          std::vector<torch::Tensor> rows;
                          for (int q = 0; q < size; ++q) {
                            const std::byte* source =
                                q == me ? piece_at(me, lo)
                                        : slots[static_cast<size_t>(q)] + me * per_piece * element;
                            rows.push_back(row(source, count, in.scalar_type()));
                          }
                          sum_rows_in_order(rows, out.narrow(0, lo, count));
                        });
                  }
                });
}

WorkPtr ShmComm::all_gather(torch::Tensor input, torch::Tensor output) {
  auto in = flat_view(input, "all_gather", "input");
  auto out = flat_view(output, "all_gather", "output");
  check_all_gather(in, out, size_);
  if (in.numel() == 0) return std::make_shared<CompletedWork>();
  State* s = state_.get();
  const int me = rank_;
  return submit("all_gather", [s, in, out, me](const char* op) {
    const int64_t total = static_cast<int64_t>(in.nbytes());
    // The input may be this rank's own slot of the output: memmove of a region onto itself.
    std::memmove(bytes(out) + me * total, bytes(in), static_cast<size_t>(total));
    const std::byte* source = bytes(out) + me * total;
    for (int64_t lo = 0; lo < total; lo += s->channel.slot_bytes()) {
      const int64_t count = std::min(s->channel.slot_bytes(), total - lo);
      s->round(
          op, [&](std::byte* mine) { std::memcpy(mine, source + lo, count); },
          [&](const std::vector<const std::byte*>& slots) {
            for (int r = 0; r < static_cast<int>(slots.size()); ++r) {
              if (r != me) std::memcpy(bytes(out) + r * total + lo, slots[r], count);
            }
          });
    }
  });
}

WorkPtr ShmComm::broadcast(torch::Tensor tensor, int root) {
  auto flat = flat_view(tensor, "broadcast", "tensor");
  check_root(root, size_, "broadcast");
  if (flat.numel() == 0) return std::make_shared<CompletedWork>();
  State* s = state_.get();
  const bool sending = rank_ == root;
  return submit("broadcast", [s, flat, root, sending](const char* op) {
    const int64_t total = static_cast<int64_t>(flat.nbytes());
    for (int64_t lo = 0; lo < total; lo += s->channel.slot_bytes()) {
      const int64_t count = std::min(s->channel.slot_bytes(), total - lo);
      s->round(
          op,
          [&](std::byte* mine) {
            if (sending) std::memcpy(mine, bytes(flat) + lo, count);
          },
          [&](const std::vector<const std::byte*>& slots) {
            if (!sending) std::memcpy(bytes(flat) + lo, slots[root], count);
          });
    }
  });
}

torch::Tensor ShmComm::shared_tensor(int64_t numel, torch::ScalarType dtype, std::string* why_not) {
  ZOFF_CHECK_ARG(numel >= 0, "shared_tensor: ", numel, " elements");
  const size_t data_bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  std::string reason;
  auto segment = map_on_every_rank<SharedSegment>(
      *this, [&] { return SharedSegment::create(data_bytes); },
      [&](const std::string& name, uint64_t nonce) {
        return SharedSegment::open(name, data_bytes, nonce);
      },
      &reason);
  if (!all_mapped(*this, segment.has_value(), reason, why_not)) {
    return {};  // the segment's destructor unmaps, and on rank 0 removes the name
  }
  // Every rank has it mapped: the name can go; the tensor's deleter owns the mapping.
  segment->unlink();
  auto owner = std::make_shared<SharedSegment>(std::move(*segment));
  return torch::from_blob(
      owner->data(), {numel}, [owner](void*) mutable { owner.reset(); },
      torch::TensorOptions().dtype(dtype));
}

void ShmComm::barrier() {
  State* s = state_.get();
  submit("barrier", [s](const char* op) { s->round(op, nullptr, nullptr); })->wait();
}

}  // namespace zoff::dist
