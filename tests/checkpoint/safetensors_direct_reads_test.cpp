// SafetensorsFile::use_direct_reads: tensors read around the page cache (O_DIRECT, aligned
// chunks) equal the buffered reads bit for bit, at unaligned offsets, across chunk edges
// and up to the end of the file; a file cut short fails with one line naming it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_test_support.h"
#include "zoff/checkpoint/safetensors_reader.h"
#include "zoff/checkpoint/safetensors_writer.h"
#include "zoff/core/error.h"

namespace zoff::checkpoint::safetensors_direct_reads_test {
namespace {

using testing::ScratchDir;

// Sizes chosen around the reader's edges: below kDirectMinBytes (buffered either way), just
// past 1 MiB at an offset that is not a multiple of 4 KiB, past two 8 MiB chunks, and last
// (its end is the end of the file).
std::vector<std::pair<std::string, torch::Tensor>> tensors() {
  torch::manual_seed(7);
  return {{"small", torch::randn({1000})},
          {"odd", torch::randn({3, (1 << 20) / 6 + 1}).to(torch::kBFloat16)},
          {"large", torch::randn({17 * (1 << 20) / 4 + 3})},
          {"last", torch::randn({(1 << 20) + 5}).to(torch::kBFloat16)}};
}

std::string write_file(const ScratchDir& dir) {
  const std::string path = dir / "model.safetensors";
  SafetensorsWriter w(path);
  for (const auto& [name, t] : tensors()) w.declare(name, t.scalar_type(), t.sizes().vec());
  for (const auto& [name, t] : tensors()) w.write(name, t);
  w.commit();
  return path;
}

TEST(SafetensorsDirectReads, EqualTheBufferedReadsBitForBit) {
  ScratchDir dir;
  const std::string path = write_file(dir);
  SafetensorsFile direct(path);
  if (!direct.use_direct_reads()) GTEST_SKIP() << "no O_DIRECT on the file system of " << path;
  EXPECT_TRUE(direct.direct_reads());
  for (const auto& [name, want] : tensors()) {
    auto got = torch::empty_like(want);
    direct.read_into(name, got);
    EXPECT_TRUE(torch::equal(got, want)) << name;
  }
}

TEST(SafetensorsDirectReads, AFileCutShortIsOneErrorNamingIt) {
  ScratchDir dir;
  const std::string path = write_file(dir);
  SafetensorsFile direct(path);  // the header checked against the whole file
  if (!direct.use_direct_reads()) GTEST_SKIP() << "no O_DIRECT on the file system of " << path;
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  const auto last = tensors().back().second;
  auto got = torch::empty_like(last);
  try {
    direct.read_into("last", got);
    ADD_FAILURE() << "a read past the end of the file succeeded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("truncated"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace zoff::checkpoint::safetensors_direct_reads_test
