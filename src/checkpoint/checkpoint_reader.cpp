// CheckpointReader: verified, streaming reads of whole parameters from the shard files.
#include "zoff/checkpoint/checkpoint_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "zoff/core/error.h"

namespace zoff::checkpoint {

CheckpointReader::CheckpointReader(const std::string& dir_or_root)
    : info_(read_checkpoint_info(dir_or_root)) {
  const uint64_t shard_bytes = static_cast<uint64_t>(info_.shard_size()) * sizeof(float);
  try {
    for (int r = 0; r < info_.world_size; ++r) {
      const auto& entry = info_.files[static_cast<size_t>(r)];
      const std::string path = (std::filesystem::path(info_.dir) / entry.name).string();
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      ZOFF_CHECK_ARG(fd >= 0, path, ": missing (", std::strerror(errno), ")");
      fds_.push_back(fd);
      paths_.push_back(path);
      const auto digest = digest_file(path);
      ZOFF_CHECK_ARG(digest.bytes == entry.bytes, path, ": ", digest.bytes,
                     " bytes, meta.json says ", entry.bytes,
                     digest.bytes < entry.bytes ? " (truncated)" : "");
      ZOFF_CHECK_ARG(digest.crc32 == entry.crc32, path, ": corrupt (CRC32 ", digest.crc32,
                     ", meta.json says ", entry.crc32, ")");
      const auto h = read_rank_file_header(fd, path, digest.bytes);
      ZOFF_CHECK_ARG(
          h.rank == r && h.world == info_.world_size && h.shard_offset == r * info_.shard_size() &&
              h.shard_size == info_.shard_size(),
          path, ": header says rank ", h.rank, " of ", h.world, ", shard [", h.shard_offset, ", +",
          h.shard_size, "), meta.json implies rank ", r, " of ", info_.world_size, ", shard [",
          r * info_.shard_size(), ", +", info_.shard_size(), ")");
      const auto& master = h.section("master", path);
      ZOFF_CHECK_ARG(master.dtype == "F32" && master.bytes == shard_bytes, path,
                     ": section 'master' is ", master.dtype, " of ", master.bytes,
                     " bytes, expected F32 of ", shard_bytes);
      master_start_.push_back(h.data_start + master.offset);
      check_replicated_sections(info_.replicated, h, path);
      if (r == 0) header0_ = h;
    }
  } catch (...) {
    for (int fd : fds_) ::close(fd);
    throw;
  }
}

CheckpointReader::~CheckpointReader() {
  for (int fd : fds_) ::close(fd);
}

void CheckpointReader::read_flat(int64_t offset, int64_t count, float* out) const {
  ZOFF_CHECK(offset >= 0 && count >= 0 && offset + count <= info_.padded_numel, "read_flat [",
             offset, ", +", count, ") outside the ", info_.padded_numel, "-element layout");
  const auto& regions = info_.regions;
  int64_t pos = offset;
  const int64_t end = offset + count;
  // The region holding `pos`: the last one starting at or before it (they are sorted).
  auto it =
      std::upper_bound(regions.begin(), regions.end(), pos,
                       [](int64_t p, const partition::ShardRegion& r) { return p < r.offset; });
  while (pos < end) {
    const auto& region = *std::prev(it);
    const int64_t S = region.shard_size;
    const int64_t r = (pos - region.offset) / S;
    const int64_t piece_end = std::min(end, region.offset + (r + 1) * S);
    const int64_t local = region.shard_offset + (pos - region.offset - r * S);
    const auto rr = static_cast<size_t>(r);
    read_exact(fds_[rr], paths_[rr],
               master_start_[rr] + static_cast<uint64_t>(local) * sizeof(float),
               out + (pos - offset), static_cast<size_t>(piece_end - pos) * sizeof(float));
    pos = piece_end;
    if (it != regions.end() && pos >= it->offset) ++it;
  }
}

torch::Tensor CheckpointReader::read_param(const partition::ParamSlot& slot) const {
  auto t = torch::empty(slot.shape, torch::kFloat32);
  ZOFF_CHECK(t.numel() == slot.numel, "parameter ", slot.name, ": shape does not hold ", slot.numel,
             " elements");
  read_flat(slot.offset, slot.numel, t.data_ptr<float>());
  return t;
}

const partition::ParamSlot& CheckpointReader::slot(const std::string& name) const {
  for (const auto& s : info_.slots) {
    if (s.name == name) return s;
  }
  throw UsageError(detail::concat("checkpoint ", info_.dir, " has no parameter '", name, "'"));
}

torch::Tensor CheckpointReader::read_replicated(const ReplicatedEntry& entry) const {
  return checkpoint::read_replicated(fds_.front(), paths_.front(), header0_, entry);
}

torch::Tensor CheckpointReader::read_named(const std::string& name) const {
  std::string first = name;
  for (const auto& [alias, target] : info_.aliases) {
    if (alias == name) first = target;
  }
  for (const auto& s : info_.slots) {
    if (s.name == first) return read_param(s);
  }
  for (const auto& e : info_.replicated) {
    if (e.name == first) return read_replicated(e);
  }
  return torch::Tensor();
}

}  // namespace zoff::checkpoint
