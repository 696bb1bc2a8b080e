// IDX (MNIST-format) files: header checks and payload, through zlib for .gz files.
#include "zoff/data/idx_file.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::data {

namespace {

constexpr size_t kReadChunk = size_t{1} << 20;  // bytes per gzread call
constexpr uint32_t kMaxDim = 1u << 24;          // sanity cap on one header dimension
// Deflate's best case is 258 bytes from about 2 bits (1032:1): no gzip file inflates to more
// than this many times its size.
constexpr uint64_t kMaxDeflateRatio = 1032;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// An IDX file opened for reading through zlib (gzip or plain), with what the file says about
// its size before any of it is inflated.
struct IdxStream {
  std::string path;
  gzFile file = nullptr;
  bool gz = false;          // gzip by its magic (any name); a plain IDX file starts 00 00
  uint64_t file_bytes = 0;  // on disk
  uint32_t isize = 0;       // gzip trailer: inflated size mod 2^32 (gz only)

  explicit IdxStream(const std::string& p) : path(p) {
    read_size_and_trailer();
    file = gzopen(path.c_str(), "rb");
    ZOFF_CHECK_ARG(file != nullptr, "idx: cannot open ", path);
  }
  ~IdxStream() { gzclose(file); }
  IdxStream(const IdxStream&) = delete;
  IdxStream& operator=(const IdxStream&) = delete;

  // Inflates up to `n` bytes into `out`; returns how many came (fewer only at the end).
  size_t read(uint8_t* out, size_t n) {
    size_t done = 0;
    while (done < n) {
      const auto want = static_cast<unsigned>(std::min(n - done, kReadChunk));
      const int got = gzread(file, out + done, want);
      if (got < 0) {
        int errnum = 0;
        const std::string msg = gzerror(file, &errnum);
        ZOFF_CHECK_ARG(false, "idx: ", path, ": corrupt gzip data (", msg, ")");
      }
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

  // A gzip stream cut short reads as EOF with Z_BUF_ERROR set rather than as an error.
  void check_clean_end() {
    int errnum = Z_OK;
    const std::string msg = gzerror(file, &errnum);
    ZOFF_CHECK_ARG(errnum == Z_OK || errnum == Z_STREAM_END, "idx: ", path,
                   ": truncated or corrupt gzip data (", msg, ")");
  }

 private:
  // The file size, whether it is gzip (magic 1f 8b; a file named .gz must be: gzread would
  // otherwise read a plain file "transparently" and hide that the name lies) and for gzip
  // the ISIZE trailer (last 4 bytes, little-endian).
  void read_size_and_trailer() {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    ZOFF_CHECK_ARG(f != nullptr, "idx: cannot open ", path);
    unsigned char magic[2] = {0, 0};
    unsigned char trailer[4] = {0, 0, 0, 0};
    const size_t got = std::fread(magic, 1, 2, f);
    const bool sized = std::fseek(f, 0, SEEK_END) == 0;
    const long end = std::ftell(f);
    const bool trailed =
        end >= 4 && std::fseek(f, -4, SEEK_END) == 0 && std::fread(trailer, 1, 4, f) == 4;
    std::fclose(f);
    ZOFF_CHECK_ARG(sized && end >= 0, "idx: ", path, ": cannot read its size");
    file_bytes = static_cast<uint64_t>(end);
    gz = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    ZOFF_CHECK_ARG(gz || !ends_with(path, ".gz"), "idx: ", path,
                   ": named .gz but is not a gzip file");
    if (!gz) return;
    ZOFF_CHECK_ARG(trailed, "idx: ", path, ": truncated gzip data (", file_bytes, " bytes)");
    isize = uint32_t{trailer[0]} | (uint32_t{trailer[1]} << 8) | (uint32_t{trailer[2]} << 16) |
            (uint32_t{trailer[3]} << 24);
  }
};

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

// Reads and checks the magic and the `rank` dimensions (inflating only those bytes); returns
// the dimensions. Their product is bounded by what the file can hold: its size for a plain
// file, kMaxDeflateRatio times its size for gzip.
std::vector<int64_t> read_header(IdxStream& in, uint32_t want_magic, size_t rank) {
  const size_t header = 4 + 4 * rank;
  std::vector<uint8_t> bytes(header);
  const size_t got = in.read(bytes.data(), header);
  ZOFF_CHECK_ARG(got >= 4, "idx: ", in.path, ": ", got, " bytes, too short for an IDX header");
  const uint32_t magic = big_endian_u32(bytes.data());
  ZOFF_CHECK_ARG(magic == want_magic, "idx: ", in.path, ": magic number ", hex(magic),
                 ", expected ", hex(want_magic));
  ZOFF_CHECK_ARG(got == header, "idx: ", in.path, ": truncated header (", got, " bytes, need ",
                 header, ")");
  const uint64_t room = in.gz ? in.file_bytes * kMaxDeflateRatio
                              : (in.file_bytes > header ? in.file_bytes - header : 0);
  std::vector<int64_t> dims;
  uint64_t payload = 1;
  for (size_t d = 0; d < rank; ++d) {
    const uint32_t n = big_endian_u32(bytes.data() + 4 + 4 * d);
    ZOFF_CHECK_ARG(n >= 1 && n <= kMaxDim, "idx: ", in.path, ": dimension ", d, " = ", n,
                   ": must be in [1, ", kMaxDim, "]");
    dims.push_back(n);
    // Guard the product against overflow: anything beyond the room is truncation.
    ZOFF_CHECK_ARG(
        payload <= room / n, "idx: ", in.path, ": truncated: header dimensions ", dims_string(dims),
        " need more than the ", room,
        in.gz ? " bytes a gzip file of this size can inflate to" : " data bytes the file holds");
    payload *= n;
  }
  return dims;
}

// Before inflating the payload: the size the header declares must be the size the file
// holds (plain) or the size the gzip trailer records (mod 2^32), so a stream that inflates
// to more than declared (a gzip bomb) is refused without inflating it.
void check_declared_size(const IdxStream& in, uint64_t header, uint64_t payload) {
  if (!in.gz) {
    ZOFF_CHECK_ARG(in.file_bytes - header >= payload, "idx: ", in.path,
                   ": truncated: the header declares ", payload, " data bytes, the file holds ",
                   in.file_bytes - header);
    ZOFF_CHECK_ARG(in.file_bytes - header == payload, "idx: ", in.path, ": ",
                   in.file_bytes - header - payload, " unexpected bytes after the ", payload,
                   " data bytes");
    return;
  }
  const auto declared = static_cast<uint32_t>(header + payload);  // ISIZE is mod 2^32
  ZOFF_CHECK_ARG(in.isize >= declared, "idx: ", in.path,
                 ": truncated or corrupt gzip data: its trailer says it inflates to ", in.isize,
                 " bytes, the IDX header declares ", header + payload);
  ZOFF_CHECK_ARG(in.isize == declared, "idx: ", in.path, ": gzip data inflates to ", in.isize,
                 " bytes (its trailer says), more than the ", header + payload,
                 " the IDX header declares: refused without inflating it");
}

// Parses the header of an IDX file with `rank` dimensions and the given magic, checks the
// payload size, and returns the payload as uint8 of shape `dims`. At most the declared
// bytes (plus one) are ever inflated.
torch::Tensor parse_idx(const std::string& path, uint32_t want_magic, size_t rank) {
  IdxStream in(path);
  const std::vector<int64_t> dims = read_header(in, want_magic, rank);
  const uint64_t header = 4 + 4 * rank;
  uint64_t payload = 1;
  for (int64_t d : dims) payload *= static_cast<uint64_t>(d);
  check_declared_size(in, header, payload);
  torch::Tensor out = torch::empty(dims, torch::kUInt8);
  const size_t got = in.read(out.data_ptr<uint8_t>(), payload);
  in.check_clean_end();
  ZOFF_CHECK_ARG(got == payload, "idx: ", path, ": truncated: the header declares ", payload,
                 " data bytes, the file holds ", got);
  uint8_t extra = 0;
  ZOFF_CHECK_ARG(in.read(&extra, 1) == 0, "idx: ", path, ": ",
                 in.gz ? "gzip data holds" : "the file holds", " more than the ", header + payload,
                 " bytes the IDX header declares: refused without reading the rest");
  in.check_clean_end();
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
