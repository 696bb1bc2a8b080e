// IDX (MNIST-format) files: header checks and payload, through zlib for .gz files.
#include "zoff/data/idx_file.h"

#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::data {

namespace {

constexpr size_t kReadChunk = size_t{1} << 20;  // bytes per gzread call
constexpr uint32_t kMaxDim = 1u << 24;          // sanity cap on one header dimension

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Checks the gzip magic (1f 8b) of a file named .gz: gzread would otherwise read a plain
// file "transparently" and hide that the name lies.
void check_gzip_magic(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  ZOFF_CHECK_ARG(f != nullptr, "idx: cannot open ", path);
  unsigned char magic[2] = {0, 0};
  const size_t got = std::fread(magic, 1, 2, f);
  std::fclose(f);
  ZOFF_CHECK_ARG(got == 2 && magic[0] == 0x1f && magic[1] == 0x8b, "idx: ", path,
                 ": named .gz but is not a gzip file");
}

// The whole (decompressed) content of the file.
std::vector<uint8_t> read_all(const std::string& path) {
  const bool gz = ends_with(path, ".gz");
  if (gz) check_gzip_magic(path);
  gzFile f = gzopen(path.c_str(), "rb");
  ZOFF_CHECK_ARG(f != nullptr, "idx: cannot open ", path);
  std::vector<uint8_t> bytes;
  for (;;) {
    const size_t old = bytes.size();
    bytes.resize(old + kReadChunk);
    const int got = gzread(f, bytes.data() + old, static_cast<unsigned>(kReadChunk));
    if (got < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      ZOFF_CHECK_ARG(false, "idx: ", path, ": corrupt gzip data (", msg, ")");
    }
    bytes.resize(old + static_cast<size_t>(got));
    if (got == 0) break;
  }
  // A gzip stream cut short reads as EOF with Z_BUF_ERROR set rather than as an error.
  int errnum = Z_OK;
  const std::string msg = gzerror(f, &errnum);
  gzclose(f);
  ZOFF_CHECK_ARG(errnum == Z_OK || errnum == Z_STREAM_END, "idx: ", path,
                 ": truncated or corrupt gzip data (", msg, ")");
  return bytes;
}

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// Parses the header of an IDX file with `rank` dimensions and the given magic, checks the
// payload size, and returns the payload as uint8 of shape `dims`.
torch::Tensor parse_idx(const std::string& path, uint32_t want_magic, size_t rank) {
  const std::vector<uint8_t> bytes = read_all(path);
  const size_t header = 4 + 4 * rank;
  ZOFF_CHECK_ARG(bytes.size() >= 4, "idx: ", path, ": ", bytes.size(),
                 " bytes, too short for an IDX header");
  const uint32_t magic = big_endian_u32(bytes.data());
  ZOFF_CHECK_ARG(magic == want_magic, "idx: ", path, ": magic number ", hex(magic), ", expected ",
                 hex(want_magic));
  ZOFF_CHECK_ARG(bytes.size() >= header, "idx: ", path, ": truncated header (", bytes.size(),
                 " bytes, need ", header, ")");
  std::vector<int64_t> dims;
  size_t payload = 1;
  for (size_t d = 0; d < rank; ++d) {
    const uint32_t n = big_endian_u32(bytes.data() + 4 + 4 * d);
    ZOFF_CHECK_ARG(n >= 1 && n <= kMaxDim, "idx: ", path, ": dimension ", d, " = ", n,
                   ": must be in [1, ", kMaxDim, "]");
    dims.push_back(n);
    // Guard the product against overflow: anything beyond the file size is truncation.
    ZOFF_CHECK_ARG(payload <= (bytes.size() - header) / n, "idx: ", path,
                   ": truncated: header dimensions ", dims_string(dims), " need more than the ",
                   bytes.size() - header, " data bytes the file holds");
    payload *= n;
  }
  ZOFF_CHECK_ARG(bytes.size() - header == payload, "idx: ", path, ": ",
                 bytes.size() - header - payload, " unexpected bytes after the ", payload,
                 " data bytes");
  torch::Tensor out = torch::empty(dims, torch::kUInt8);
  std::copy(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end(),
            out.data_ptr<uint8_t>());
  return out;
}

}  // namespace

torch::Tensor read_idx_images(const std::string& path) {
  return parse_idx(path, kIdxImagesMagic, 3);
}

torch::Tensor read_idx_labels(const std::string& path) {
  return parse_idx(path, kIdxLabelsMagic, 1);
}

}  // namespace zoff::data
