// The file one rank writes into a checkpoint: its shard of the fp32 parameters and of each
// optimizer state, plus its RNG state, behind a small self-describing header.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zoff/checkpoint/atomic_file.h"

namespace zoff::checkpoint {

// Layout of rank_<r>.bin (all integers little-endian):
//   bytes 0..7    magic "ZOFFSHRD"
//   bytes 8..11   uint32 format version (kRankFileVersion)
//   bytes 12..15  uint32 J: length of the JSON header in bytes
//   bytes 16..    J bytes of JSON: {"rank", "world", "step", "shard_offset", "shard_size",
//                 "sections": [{"name", "dtype", "offset", "bytes"}, ...]}
//   zero padding up to the data start, the next multiple of kRankFileAlign bytes
//   sections, back to back; a section's offset is in bytes from the data start.
// Sections: "master" (F32, shard_size elements), "optim.<state>" (F32, shard_size elements,
// in the optimizer's state order), "rng_state" (U8: LibTorch's CPU generator state).
inline constexpr char kRankFileMagic[8] = {'Z', 'O', 'F', 'F', 'S', 'H', 'R', 'D'};
inline constexpr uint32_t kRankFileVersion = 1;
inline constexpr uint64_t kRankFileAlign = 64;  // bytes; data start and every F32 section

struct RankFileSection {
  std::string name;
  std::string dtype;    // "F32" or "U8"
  uint64_t offset = 0;  // bytes from the data start
  uint64_t bytes = 0;
  const void* data = nullptr;  // writing only: where the bytes come from, or
  // writing only, when data is null: fills `bytes` bytes of the section from byte `offset`
  // into `dst` (a section streamed from a tier, in chunks of kRankFileChunkBytes).
  std::function<void(uint64_t offset, void* dst, size_t bytes)> source;
};

// Bytes per chunk of a streamed section (a multiple of 4, so fp32 elements never split).
inline constexpr size_t kRankFileChunkBytes = size_t{16} << 20;

struct RankFileHeader {
  int rank = 0;
  int world = 1;
  int64_t step = 0;
  int64_t shard_offset = 0;  // elements into the padded flat layout
  int64_t shard_size = 0;    // elements
  uint64_t data_start = 0;   // bytes from the start of the file (filled by read/write)
  std::vector<RankFileSection> sections;

  // The named section; a missing one is a zoff::UsageError naming `path`.
  const RankFileSection& section(const std::string& name, const std::string& path) const;
};

// Writes the header and every section's bytes (from section.data) atomically to `path`;
// fills in the offsets. Returns the file's CRC32 and length.
FileDigest write_rank_file(const std::string& path, RankFileHeader header);

// Reads and checks the header of an open rank file of `file_bytes` bytes: magic, version,
// JSON, and that every section lies inside the file. Anything wrong is a zoff::UsageError
// naming `path`.
RankFileHeader read_rank_file_header(int fd, const std::string& path, uint64_t file_bytes);

}  // namespace zoff::checkpoint
