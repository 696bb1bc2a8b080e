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
#include "zoff/optim/kernels.h"
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

// One old state section's pieces, decoded to fp32 at their new positions in `values`
// (this rank's shard; padding stays 0), whatever the old dtype.
void decode_pieces(const std::vector<Piece>& pieces, const std::map<int, const OldRankFile*>& files,
                   const std::string& file_section, const std::string& old_dtype,
                   std::vector<float>* values) {
  if (engine::is_int8_code_dtype(old_dtype)) {
    for (const auto& p : pieces) {
      decode_int8_piece(p, *files.at(p.old_rank), file_section, old_dtype == "I8", values);
    }
    return;
  }
  const bool bf16 = old_dtype == "BF16";
  ZOFF_CHECK(bf16 || old_dtype == "F32", "checkpoint: state section ", file_section, " has dtype ",
             old_dtype, ", which cannot be converted");
  const int64_t chunk = static_cast<int64_t>(kRankFileChunkBytes / sizeof(float));
  std::vector<uint16_t> bits;
  for (const auto& p : pieces) {
    for (int64_t done = 0; done < p.count; done += chunk) {
      const int64_t n = std::min(chunk, p.count - done);
      float* dst = values->data() + p.new_pos + done;
      if (!bf16) {
        files.at(p.old_rank)->read(file_section, p.old_pos + done, n, sizeof(float), dst);
        continue;
      }
      bits.resize(static_cast<size_t>(n));
      files.at(p.old_rank)->read(file_section, p.old_pos + done, n, sizeof(uint16_t), bits.data());
      for (int64_t i = 0; i < n; ++i) dst[i] = optim::bf16_to_float(bits[static_cast<size_t>(i)]);
    }
  }
}

// Note: a state through fp32, when the old and new formats differ or int8 blocks do not
// line up. A shard is padded_numel / world elements, so old int8 blocks (kStateBlock
// elements from each old shard's element 0) do not line up with the new ones in general;
// and a checkpoint may hold another state dtype than the job's. Every element is decoded
// (int8 with its old block's scale) into fp32, this rank's whole shard at once (4 bytes per
// element), then encoded in the new format: exact into fp32; into bf16 rounded to nearest
// even and into int8 with new block scales, so not bitwise. Padding stays 0. Returns how
// many engine sections it wrote (int8: the codes and their scales).
size_t convert_section(const std::vector<Piece>& pieces,
                       const std::map<int, const OldRankFile*>& files,
                       const std::vector<engine::StateSection>& sections, size_t i,
                       const std::string& file_section, const std::string& old_dtype) {
  const auto& sec = sections[i];
  std::vector<float> values(static_cast<size_t>(sec.numel), 0.0f);
  decode_pieces(pieces, files, file_section, old_dtype, &values);
  if (engine::is_int8_code_dtype(sec.dtype)) {
    std::vector<uint8_t> codes(values.size());
    const auto& scales_sec = sections.at(i + 1);
    std::vector<float> scales(static_cast<size_t>(scales_sec.numel));
    optim::encode_int8_blocks(values.data(), values.size(), sec.dtype == "I8", codes.data(),
                              scales.data());
    sec.write(0, sec.numel, codes.data());
    scales_sec.write(0, scales_sec.numel, scales.data());
    return 2;
  }
  if (sec.dtype == "BF16") {
    std::vector<uint16_t> bits(values.size());
    for (size_t k = 0; k < values.size(); ++k) bits[k] = optim::float_to_bf16(values[k]);
    sec.write(0, sec.numel, bits.data());
  } else {
    sec.write(0, sec.numel, values.data());
  }
  return 1;
}

// The rank-file dtype of each old state section, by its file name ("master", "optim.x").
std::map<std::string, std::string> old_section_dtypes(const CheckpointInfo& info) {
  std::map<std::string, std::string> dtypes{{"master", "F32"}};
  for (size_t i = 0; i < info.state_names.size(); ++i) {
    dtypes["optim." + info.state_names[i]] = info.state_dtypes.at(i);
  }
  return dtypes;
}

}  // namespace

bool needs_resharding(const CheckpointInfo& info, const engine::ZeroEngine& engine) {
  const auto& layout = engine.layout();
  if (info.state_dtype != engine.config().optimizer.state_dtype) return true;  // converted
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
  const auto sections = engine.state_sections();
  const auto old_dtypes = old_section_dtypes(info);
  for (size_t i = 0; i < sections.size();) {
    const auto& sec = sections[i];
    const std::string file_section = sec.name == "master" ? "master" : "optim." + sec.name;
    const std::string& old_dtype = old_dtypes.at(file_section);
    const bool int8 = engine::is_int8_code_dtype(sec.dtype);
    if (old_dtype == sec.dtype && !int8) {  // the same format: bytes as they are
      copy_section(pieces, files, sec, file_section);
      ++i;
    } else {
      i += convert_section(pieces, files, sections, i, file_section, old_dtype);
    }
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
