// ZeroEngine's checkpoint access: this rank's master and optimizer state, and restoring them.
#include <cstring>

#include "zoff/core/error.h"
#include "zoff/engine/zero_engine.h"

namespace zoff::engine {
namespace {

// A section over `numel` elements of `dtype` in host memory at `data`.
StateSection memory_section(std::string name, std::string dtype, int64_t numel, void* data) {
  StateSection s;
  s.name = std::move(name);
  s.dtype = std::move(dtype);
  s.numel = numel;
  const size_t bytes = section_element_bytes(s.dtype);
  auto* base = static_cast<char*>(data);
  s.read = [base, bytes](int64_t offset, int64_t n, void* dst) {
    std::memcpy(dst, base + static_cast<size_t>(offset) * bytes, static_cast<size_t>(n) * bytes);
  };
  s.write = [base, bytes](int64_t offset, int64_t n, const void* src) {
    std::memcpy(base + static_cast<size_t>(offset) * bytes, src, static_cast<size_t>(n) * bytes);
  };
  return s;
}

// A section over an fp32 tensor in host memory.
StateSection tensor_section(std::string name, torch::Tensor t) {
  return memory_section(std::move(name), "F32", t.numel(), t.data_ptr<float>());
}

// The rank-file dtype of optimizer state `name` stored as `dtype`: int8 codes are signed for
// exp_avg and unsigned for exp_avg_sq (state_dtype.h's mappings).
std::string section_dtype(optim::StateDtype dtype, const std::string& name) {
  switch (dtype) {
    case optim::StateDtype::kFp32:
      return "F32";
    case optim::StateDtype::kBf16:
      return "BF16";
    case optim::StateDtype::kInt8:
      return name == "exp_avg" ? "I8" : "U8";
  }
  return "?";
}

// The sections of one stored optimizer state over `numel` elements from element `offset`
// (stage 0 narrows the whole-buffer state to this rank's shard): fp32 floats, bf16 bits,
// or int8 codes (signed for exp_avg, unsigned for exp_avg_sq) followed by their scales. An
// int8 section must be one whole segment of the state's block grid (stage 0's optimizer
// restarts it at every rank's shard), so its codes and scales stand alone.
void add_stored_sections(const std::string& name, const optim::StoredState& st, int64_t offset,
                         int64_t numel, std::vector<StateSection>* out) {
  const std::string dtype = section_dtype(st.dtype, name);
  const size_t elem = section_element_bytes(dtype);
  out->push_back(memory_section(name, dtype, numel, static_cast<char*>(st.data) + offset * elem));
  if (st.dtype != optim::StateDtype::kInt8) return;
  const auto segment = static_cast<int64_t>(st.segment_numel);
  ZOFF_CHECK(segment > 0 && offset % segment == 0 && numel <= segment, "int8 state ", name,
             ": elements [", offset, ", ", offset + numel, ") are not one segment of ", segment);
  const size_t first = static_cast<size_t>(offset / segment) * optim::state_blocks(segment);
  const size_t blocks = optim::state_blocks(static_cast<size_t>(numel));
  ZOFF_CHECK(first + blocks <= st.num_scales, "int8 state ", name, ": scales ", first, " + ",
             blocks, " past its ", st.num_scales);
  out->push_back(
      memory_section(name + ".scales", "F32", static_cast<int64_t>(blocks), st.scales + first));
}

// Stage 0 with several ranks, after each rank loaded its own shard of a whole-buffer
// state: every rank's piece ([rank * n, + n) of n = size() equal pieces) to every rank.
// Any dtype: the bytes move as they are.
void gather_pieces(dist::Comm& comm, void* data, int64_t piece_numel, torch::ScalarType dtype) {
  const int64_t world = comm.size();
  auto whole = torch::from_blob(data, {world * piece_numel}, dtype);
  auto mine = whole.narrow(0, comm.rank() * piece_numel, piece_numel).clone();
  comm.all_gather(mine, whole)->wait();
}

// The same for one stored optimizer state, whose segments are the ranks' shards.
void gather_stored(dist::Comm& comm, const optim::StoredState& st, int64_t shard_numel) {
  switch (st.dtype) {
    case optim::StateDtype::kFp32:
      gather_pieces(comm, st.data, shard_numel, torch::kFloat32);
      return;
    case optim::StateDtype::kBf16:
      gather_pieces(comm, st.data, shard_numel, torch::kInt16);
      return;
    case optim::StateDtype::kInt8:
      ZOFF_CHECK(st.segment_numel == static_cast<size_t>(shard_numel),
                 "int8 state: block segments of ", st.segment_numel, " elements, not the shard's ",
                 shard_numel);
      gather_pieces(comm, st.data, shard_numel, torch::kUInt8);
      gather_pieces(comm, st.scales,
                    static_cast<int64_t>(optim::state_blocks(static_cast<size_t>(shard_numel))),
                    torch::kFloat32);
      return;
  }
}

}  // namespace

size_t section_element_bytes(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16") return 2;
  if (is_int8_code_dtype(dtype)) return 1;
  throw UsageError("state section dtype '" + dtype + "': must be F32, BF16, I8 or U8");
}

bool is_int8_code_dtype(const std::string& dtype) { return dtype == "I8" || dtype == "U8"; }

optim::ShardOptimizer& ZeroEngine::optimizer() {
  ZOFF_CHECK(optimizer_ != nullptr,
             "engine.optimizer(): the optimizer state lives in the nvme tier (see tiered())");
  return *optimizer_;
}

torch::Tensor ZeroEngine::master_shard() {
  ZOFF_CHECK(!tiered_, "master_shard(): the master lives in the nvme tier (use state_sections())");
  ZOFF_CHECK(!pending_update_.valid(),
             "master_shard() during a delayed update: synchronize() first");
  // Stage 0's master is the whole buffer, whose single region splits rank by rank.
  return stage() == 0 ? master_.narrow(0, shard_.offset, shard_.size) : master_;
}

std::vector<std::pair<std::string, torch::Tensor>> ZeroEngine::optimizer_state_shard() {
  ZOFF_CHECK(!tiered_,
             "optimizer_state_shard(): the states live in the nvme tier (use state_sections())");
  ZOFF_CHECK(!pending_update_.valid(),
             "optimizer_state_shard() during a delayed update: synchronize() first");
  ZOFF_CHECK_ARG(config_.optimizer.state_dtype == "fp32",
                 "optimizer_state_shard(): the states are ", config_.optimizer.state_dtype,
                 ", not fp32 tensors (use state_sections())");
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const int64_t numel = static_cast<int64_t>(optimizer_->numel());
  for (auto& [name, ptr] : optimizer_->state_buffers()) {
    auto whole = torch::from_blob(ptr, {numel}, torch::kFloat32);
    out.emplace_back(name, stage() == 0 ? whole.narrow(0, shard_.offset, shard_.size) : whole);
  }
  return out;
}

std::vector<StateSection> ZeroEngine::state_sections() {
  std::vector<StateSection> out;
  if (!tiered_) {
    out.push_back(tensor_section("master", master_shard()));
    // Stage 0's optimizer holds the whole buffer, its int8 blocks segmented by shard.
    const int64_t offset = stage() == 0 ? shard_.offset : 0;
    for (auto& [name, st] : optimizer_->stored_state_buffers()) {
      add_stored_sections(name, st, offset, shard_.size, &out);
    }
    return out;
  }
  const auto names = tiered_->region_names();
  for (size_t r = 0; r < names.size(); ++r) {
    StateSection s;
    s.name = names[r];
    s.dtype = r == 0 ? "F32" : section_dtype(tiered_->optimizer().state_dtype(), s.name);
    s.numel = shard_.size;
    TieredOptimizer* t = tiered_.get();
    s.read = [t, r](int64_t offset, int64_t n, void* dst) {
      t->read(r, static_cast<size_t>(offset), static_cast<size_t>(n), dst);
    };
    s.write = [t, r](int64_t offset, int64_t n, const void* src) {
      t->write(r, static_cast<size_t>(offset), static_cast<size_t>(n), src);
    };
    out.push_back(std::move(s));
    if (r > 0 && tiered_->has_scales()) {  // int8: the scales, in host memory
      out.push_back(memory_section(names[r] + ".scales", "F32",
                                   static_cast<int64_t>(tiered_->num_scales()),
                                   tiered_->scales(r - 1)));
    }
  }
  return out;
}

// The compute parameters from the master: rounded to the compute dtype (nearest even, as
// the fused pass does). From the nvme tier, sub-group by sub-group.
void ZeroEngine::rebuild_compute_from_master() {
  if (!tiered_) {
    // Without a 16-bit shard the publish rounds from the master itself.
    if (compute_dtype_ != torch::kFloat32 && optimizer_output().defined()) {
      optimizer_output().copy_(master_);
    }
    return;
  }
  // A multiple of 2048 elements: 16-bit chunks of the parameter region start aligned.
  const int64_t chunk = tiered_->sub_group_elems();
  auto buf = torch::empty({chunk}, torch::kFloat32);
  offload::HostBuffer out;
  if (param_region_) {
    out = offload::HostBuffer(static_cast<size_t>(chunk) * c10::elementSize(compute_dtype_),
                              param_tier_->alignment());
  }
  for (int64_t at = 0; at < shard_.size; at += chunk) {
    const int64_t n = std::min(chunk, shard_.size - at);
    tiered_->read(0, static_cast<size_t>(at), static_cast<size_t>(n), buf.data_ptr<float>());
    if (!param_region_) {
      shard_space_.narrow(0, at, n).copy_(buf.narrow(0, 0, n));
      continue;
    }
    auto rounded = buf.narrow(0, 0, n).to(compute_dtype_);
    const size_t bytes = static_cast<size_t>(rounded.nbytes());
    std::memcpy(out.data(), rounded.data_ptr(), bytes);
    param_region_
        ->write(static_cast<uint64_t>(at) * c10::elementSize(compute_dtype_), out.data(), bytes)
        .wait();
  }
}

void ZeroEngine::restore_from_shards(int64_t step, int64_t applied_steps) {
  ZOFF_CHECK(!pending_update_.valid(), "restore_from_shards during a delayed update");
  torch::NoGradGuard no_grad;
  if (stage() == 0 && comm_->size() > 1) {
    // Every rank of stage 0 holds the whole master and optimizer state: gather them.
    for (auto& [name, st] : optimizer_->stored_state_buffers()) {
      gather_stored(*comm_, st, shard_.size);
    }
    gather_pieces(*comm_, master_.data_ptr<float>(), shard_.size, torch::kFloat32);
  }
  rebuild_compute_from_master();
  publish_params();
  step_ = step;
  applied_ = applied_steps < 0 ? step : applied_steps;
  if (tiered_) {
    tiered_->optimizer().set_step_count(applied_);
  } else {
    optimizer_->set_step_count(applied_);
  }
}

}  // namespace zoff::engine
