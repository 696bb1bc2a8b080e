// Writing and reading the per-rank shard files of a checkpoint.
#include "zoff/checkpoint/rank_file.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "zoff/core/error.h"
#include "zoff/core/round_up.h"

namespace zoff::checkpoint {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint files are little-endian and written from memory as is");

// A header longer than this is not one of ours (protects against reading garbage sizes).
constexpr uint32_t kMaxHeaderJsonBytes = 1u << 20;
constexpr size_t kPrefixBytes = 16;  // magic, version, JSON length

}  // namespace

const RankFileSection& RankFileHeader::section(const std::string& name,
                                               const std::string& path) const {
  for (const auto& s : sections) {
    if (s.name == name) return s;
  }
  throw UsageError(detail::concat(path, ": no section '", name, "'"));
}

FileDigest write_rank_file(const std::string& path, RankFileHeader header) {
  nlohmann::ordered_json j;
  j["rank"] = header.rank;
  j["world"] = header.world;
  j["step"] = header.step;
  j["shard_offset"] = header.shard_offset;
  j["shard_size"] = header.shard_size;
  j["sections"] = nlohmann::ordered_json::array();
  uint64_t offset = 0;
  for (auto& s : header.sections) {
    s.offset = offset;
    j["sections"].push_back(
        {{"name", s.name}, {"dtype", s.dtype}, {"offset", s.offset}, {"bytes", s.bytes}});
    offset = round_up(offset + s.bytes, kRankFileAlign);
  }
  const std::string text = j.dump();
  header.data_start = round_up(kPrefixBytes + text.size(), kRankFileAlign);

  std::string prefix(kPrefixBytes, '\0');
  const uint32_t version = kRankFileVersion;
  const auto json_bytes = static_cast<uint32_t>(text.size());
  std::memcpy(prefix.data(), kRankFileMagic, 8);
  std::memcpy(prefix.data() + 8, &version, 4);
  std::memcpy(prefix.data() + 12, &json_bytes, 4);

  AtomicFileWriter out(path);
  out.write(prefix.data(), prefix.size());
  out.write(text.data(), text.size());
  const std::string zeros(kRankFileAlign, '\0');
  auto pad_to = [&](uint64_t target) {
    while (out.bytes() < target) {
      out.write(zeros.data(), std::min<uint64_t>(zeros.size(), target - out.bytes()));
    }
  };
  std::vector<char> chunk;
  for (const auto& s : header.sections) {
    pad_to(header.data_start + s.offset);
    if (s.data != nullptr || !s.source) {
      out.write(s.data, s.bytes);
      continue;
    }
    chunk.resize(std::min<uint64_t>(s.bytes, kRankFileChunkBytes));
    for (uint64_t done = 0; done < s.bytes; done += chunk.size()) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(chunk.size(), s.bytes - done));
      s.source(done, chunk.data(), k);
      out.write(chunk.data(), k);
    }
  }
  const FileDigest digest{out.crc32(), out.bytes()};
  out.commit();
  return digest;
}

RankFileHeader read_rank_file_header(int fd, const std::string& path, uint64_t file_bytes) {
  ZOFF_CHECK_ARG(file_bytes >= kPrefixBytes, path, ": truncated (", file_bytes,
                 " bytes, shorter than the header)");
  char prefix[kPrefixBytes];
  read_exact(fd, path, 0, prefix, kPrefixBytes);
  ZOFF_CHECK_ARG(std::memcmp(prefix, kRankFileMagic, 8) == 0, path,
                 ": not a zoff shard file (bad magic)");
  uint32_t version = 0, json_bytes = 0;
  std::memcpy(&version, prefix + 8, 4);
  std::memcpy(&json_bytes, prefix + 12, 4);
  ZOFF_CHECK_ARG(version == kRankFileVersion, path, ": format version ", version,
                 ", this zoff reads version ", kRankFileVersion);
  ZOFF_CHECK_ARG(json_bytes <= kMaxHeaderJsonBytes && kPrefixBytes + json_bytes <= file_bytes, path,
                 ": corrupt header (JSON length ", json_bytes, ")");
  std::string text(json_bytes, '\0');
  read_exact(fd, path, kPrefixBytes, text.data(), json_bytes);

  RankFileHeader h;
  try {
    const auto j = nlohmann::json::parse(text);
    h.rank = j.at("rank").get<int>();
    h.world = j.at("world").get<int>();
    h.step = j.at("step").get<int64_t>();
    h.shard_offset = j.at("shard_offset").get<int64_t>();
    h.shard_size = j.at("shard_size").get<int64_t>();
    for (const auto& s : j.at("sections")) {
      RankFileSection sec;
      sec.name = s.at("name").get<std::string>();
      sec.dtype = s.at("dtype").get<std::string>();
      sec.offset = s.at("offset").get<uint64_t>();
      sec.bytes = s.at("bytes").get<uint64_t>();
      h.sections.push_back(sec);
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(detail::concat(path, ": corrupt header: ", e.what()));
  }
  h.data_start = round_up(kPrefixBytes + json_bytes, kRankFileAlign);
  for (const auto& s : h.sections) {
    ZOFF_CHECK_ARG(h.data_start + s.offset + s.bytes <= file_bytes, path, ": truncated (section '",
                   s.name, "' ends at byte ", h.data_start + s.offset + s.bytes, ", file has ",
                   file_bytes, ")");
  }
  return h;
}

}  // namespace zoff::checkpoint
