// A checkpoint read into another layout: each element found by parameter name and offset.
//
// Note: how an element is found. Both layouts place every parameter (a slot: name, offset
// into the padded flat buffer, numel) somewhere in a flat buffer, and split that buffer
// into regions whose r-th piece of shard_size elements is rank r's (one region without
// units, one per unit at stage 3; see ShardRegion). So an element of this rank's shard
// space is: new region piece -> flat element -> slot and offset in it -> the same slot's
// flat element in the old layout -> old region, old rank, position in that rank's shard
// space -> the byte in that rank's file. Runs of consecutive elements map to runs, so the
// copy is a list of (old rank, old position, new position, count) pieces.
#include "reshard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <string>

#include "zoff/checkpoint/atomic_file.h"
#include "zoff/checkpoint/replicated_sections.h"
#include "zoff/core/error.h"
#include "zoff/optim/state_dtype.h"

namespace zoff::checkpoint {
namespace {

struct Piece {
  int old_rank = 0;
  int64_t old_pos = 0;  // in the old rank's shard space
  int64_t new_pos = 0;  // in this rank's shard space
  int64_t count = 0;
};

// Splits the old flat range [flat, flat + n) by the old layout's regions and ranks.
void add_old_runs(const CheckpointInfo& info, int64_t flat, int64_t n, int64_t new_pos,
                  std::vector<Piece>* out) {
  while (n > 0) {
    auto it =
        std::upper_bound(info.regions.begin(), info.regions.end(), flat,
                         [](int64_t e, const partition::ShardRegion& r) { return e < r.offset; });
    ZOFF_CHECK(it != info.regions.begin(), "checkpoint ", info.dir, ": element ", flat,
               " lies in no region");
    const auto& region = *(it - 1);
    const int64_t k = flat - region.offset;
    const int64_t in_piece = k % region.shard_size;
    const int64_t run = std::min(n, region.shard_size - in_piece);
    out->push_back(
        {static_cast<int>(k / region.shard_size), region.shard_offset + in_piece, new_pos, run});
    flat += run;
    new_pos += run;
    n -= run;
  }
}

// Every run of this rank's shard space that holds parameter elements, and where it was.
std::vector<Piece> plan_pieces(const CheckpointInfo& info, const engine::ZeroEngine& engine) {
  std::map<std::string, const partition::ParamSlot*> old_slots;
  for (const auto& s : info.slots) old_slots[s.name] = &s;
  const auto& layout = engine.layout();
  const int64_t rank = engine.comm()->rank();
  std::vector<Piece> pieces;
  for (const auto& region : layout.regions()) {
    const int64_t lo = region.offset + rank * region.shard_size;  // my piece, flat elements
    const int64_t hi = lo + region.shard_size;
    for (const auto& slot : layout.slots()) {
      const int64_t a = std::max(lo, slot.offset);
      const int64_t b = std::min(hi, slot.offset + slot.numel);
      if (a >= b) continue;
      const auto* old = old_slots.at(slot.name);
      add_old_runs(info, old->offset + (a - slot.offset), b - a, region.shard_offset + (a - lo),
                   &pieces);
    }
  }
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const Piece& x, const Piece& y) { return x.old_rank < y.old_rank; });
  return pieces;
}

// An old rank's file, verified and open for reading.
class OldRankFile {
 public:
  OldRankFile(const CheckpointInfo& info, int rank)
      : path_(info.dir + "/" + info.files.at(static_cast<size_t>(rank)).name),
        header_(verify_rank_file_of(info, rank)) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ZOFF_CHECK_ARG(fd_ >= 0, "cannot read ", path_, ": ", std::strerror(errno));
  }
  ~OldRankFile() { ::close(fd_); }
  OldRankFile(const OldRankFile&) = delete;
  OldRankFile& operator=(const OldRankFile&) = delete;

  // `n` elements of `elem` bytes of section `name` from element `at` of the old rank's
  // shard space (or of its int8 scales).
  void read(const std::string& name, int64_t at, int64_t n, size_t elem, void* dst) const {
    const auto& s = header_.section(name, path_);
    read_exact(fd_, path_, header_.data_start + s.offset + static_cast<uint64_t>(at) * elem, dst,
               static_cast<size_t>(n) * elem);
  }
  const RankFileHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  int fd() const { return fd_; }

 private:
  std::string path_;
  RankFileHeader header_;
  int fd_ = -1;
};

// Copies every piece of one state section, one chunk of at most kRankFileChunkBytes.
void copy_section(const std::vector<Piece>& pieces, const std::map<int, const OldRankFile*>& files,
                  const engine::StateSection& sec, const std::string& file_section) {
  const size_t elem = engine::section_element_bytes(sec.dtype);
  const int64_t chunk = static_cast<int64_t>(kRankFileChunkBytes / elem);
  std::vector<char> buf;
  for (const auto& p : pieces) {
    for (int64_t done = 0; done < p.count; done += chunk) {
      const int64_t n = std::min(chunk, p.count - done);
      buf.resize(static_cast<size_t>(n) * elem);
      files.at(p.old_rank)->read(file_section, p.old_pos + done, n, elem, buf.data());
      sec.write(p.new_pos + done, n, buf.data());
    }
  }
}

// Decodes one piece of an old int8 state (codes and the scales of the blocks they lie in)
// into `values` at the piece's new position.
void decode_int8_piece(const Piece& p, const OldRankFile& file, const std::string& codes_section,
                       bool is_signed, std::vector<float>* values) {
  const int64_t block = static_cast<int64_t>(optim::kStateBlock);
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  for (int64_t done = 0; done < p.count; done += block) {
    const int64_t at = p.old_pos + done;
    const int64_t n = std::min(block, p.count - done);
    const int64_t b0 = at / block, b1 = (at + n - 1) / block;  // at most two blocks
    codes.resize(static_cast<size_t>(n));
    scales.resize(static_cast<size_t>(b1 - b0 + 1));
    file.read(codes_section, at, n, 1, codes.data());
    file.read(codes_section + ".scales", b0, b1 - b0 + 1, sizeof(float), scales.data());
    for (int64_t i = 0; i < n; ++i) {
      const float scale = scales[static_cast<size_t>((at + i) / block - b0)];
      const uint8_t q = codes[static_cast<size_t>(i)];
      (*values)[static_cast<size_t>(p.new_pos + done + i)] =
          is_signed ? optim::decode_signed(static_cast<int8_t>(q), scale)
                    : optim::decode_unsigned(q, scale);
    }
  }
}

// Note: int8 states in another layout. A shard is padded_numel / world elements, so the old
// blocks (kStateBlock elements from each old shard's element 0) do not line up with the new
// ones in general: every element is decoded with its old block's scale into fp32 (this
// rank's whole shard: 4 bytes per element in memory, once) and the new blocks are encoded
// from that, as the step encodes (scale = block absmax). Not bitwise: a value may move by
// up to a code step. Padding elements stay at the fresh engine's zeros.
void reencode_int8(const std::vector<Piece>& pieces, const std::map<int, const OldRankFile*>& files,
                   const engine::StateSection& codes_sec, const engine::StateSection& scales_sec,
                   const std::string& file_section) {
  const bool is_signed = codes_sec.dtype == "I8";
  std::vector<float> values(static_cast<size_t>(codes_sec.numel), 0.0f);
  for (const auto& p : pieces) {
    decode_int8_piece(p, *files.at(p.old_rank), file_section, is_signed, &values);
  }
  std::vector<uint8_t> codes(values.size());
  std::vector<float> scales(optim::state_blocks(values.size()));
  for (size_t b = 0; b < scales.size(); ++b) {
    const size_t lo = b * optim::kStateBlock;
    const size_t hi = std::min(values.size(), lo + optim::kStateBlock);
    float absmax = 0.0f;
    for (size_t i = lo; i < hi; ++i) absmax = std::max(absmax, std::fabs(values[i]));
    scales[b] = absmax;
    const float inv = optim::block_inv_scale(absmax);
    for (size_t i = lo; i < hi; ++i) {
      codes[i] = is_signed ? static_cast<uint8_t>(optim::encode_signed(values[i], inv))
                           : optim::encode_unsigned(values[i], inv);
    }
  }
  codes_sec.write(0, codes_sec.numel, codes.data());
  scales_sec.write(0, scales_sec.numel, scales.data());
}

}  // namespace

bool needs_resharding(const CheckpointInfo& info, const engine::ZeroEngine& engine) {
  const auto& layout = engine.layout();
  if (info.world_size != engine.comm()->size() || info.padded_numel != layout.padded_numel() ||
      info.regions.size() != layout.regions().size() ||
      info.slots.size() != layout.slots().size()) {
    return true;
  }
  for (size_t i = 0; i < info.regions.size(); ++i) {
    const auto& a = info.regions[i];
    const auto& b = layout.regions()[i];
    if (a.offset != b.offset || a.padded_numel != b.padded_numel) return true;
  }
  for (size_t i = 0; i < info.slots.size(); ++i) {
    if (info.slots[i].name != layout.slots()[i].name ||
        info.slots[i].offset != layout.slots()[i].offset) {
      return true;
    }
  }
  return false;
}

void check_same_parameters(const CheckpointInfo& info, const engine::ZeroEngine& engine) {
  std::map<std::string, const partition::ParamSlot*> old_slots;
  for (const auto& s : info.slots) old_slots[s.name] = &s;
  const std::string where = "checkpoint " + info.dir;
  const auto& slots = engine.layout().slots();
  ZOFF_CHECK_ARG(old_slots.size() == slots.size(), where, " has ", info.slots.size(),
                 " parameters (", info.numel, " elements), this model has ", slots.size(), " (",
                 engine.layout().numel(), ")");
  for (const auto& s : slots) {
    auto it = old_slots.find(s.name);
    ZOFF_CHECK_ARG(it != old_slots.end(), where, " has no parameter ", s.name);
    ZOFF_CHECK_ARG(it->second->shape == s.shape, where, ": parameter ", s.name, " is ",
                   torch::IntArrayRef(it->second->shape), ", this model's is ",
                   torch::IntArrayRef(s.shape));
  }
}

std::vector<uint8_t> read_resharded(const CheckpointInfo& info, engine::ZeroEngine& engine) {
  const auto pieces = plan_pieces(info, engine);
  std::map<int, std::unique_ptr<OldRankFile>> open;
  std::map<int, const OldRankFile*> files;
  const int rng_rank = engine.comm()->rank() % info.world_size;
  for (int r : {0, rng_rank}) open.emplace(r, std::make_unique<OldRankFile>(info, r));
  for (const auto& p : pieces) {
    if (!open.count(p.old_rank)) {
      open.emplace(p.old_rank, std::make_unique<OldRankFile>(info, p.old_rank));
    }
  }
  for (const auto& [r, f] : open) files[r] = f.get();
  auto sections = engine.state_sections();
  for (size_t i = 0; i < sections.size(); ++i) {
    const auto& sec = sections[i];
    const std::string file_section = sec.name == "master" ? "master" : "optim." + sec.name;
    if (sec.dtype == "I8" || sec.dtype == "U8") {  // followed by its scales
      reencode_int8(pieces, files, sec, sections.at(i + 1), file_section);
      ++i;
      continue;
    }
    copy_section(pieces, files, sec, file_section);
  }
  torch::NoGradGuard no_grad;
  const OldRankFile& first = *files.at(0);
  const auto targets = engine.replicated().all();
  for (size_t i = 0; i < info.replicated.size(); ++i) {
    targets.at(i).second.copy_(
        read_replicated(first.fd(), first.path(), first.header(), info.replicated[i]));
  }
  const OldRankFile& rng_file = *files.at(rng_rank);
  const auto& s = rng_file.header().section("rng_state", rng_file.path());
  std::vector<uint8_t> rng(s.bytes);
  read_exact(rng_file.fd(), rng_file.path(), rng_file.header().data_start + s.offset, rng.data(),
             s.bytes);
  return rng;
}

}  // namespace zoff::checkpoint
