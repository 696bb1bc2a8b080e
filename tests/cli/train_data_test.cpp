// `zoff train --data PATH`: gpt trains on a text file or directory the test writes, cnn on a copy
// of the Fashion-MNIST IDX files (one gzip'd, one not); a bad path is one line naming it, exit 2.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::train_data_test {
namespace {

namespace fs = std::filesystem;
constexpr const char* kMnist = "/usr/share/datasets/fashion-mnist";

const char* const kConfig =
    R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";

ProcessResult train_on(const TempDir& dir, const std::string& model, const std::string& data) {
  write_text(dir.file("c.json"), kConfig);
  return run_zoff({"train", "--model", model, "--config", dir.file("c.json"), "--steps", "2",
                   "--threads", "1", "--eval-every", "100", "--data", data});
}

TEST(TrainData, GptTrainsOnATextFile) {
  TempDir dir;
  std::string text;
  while (text.size() < 20000)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(text.size()) + "\n";
  write_text(dir.file("corpus.txt"), text);
  const auto r = train_on(dir, "gpt", dir.file("corpus.txt"));
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("done: 2 steps"), std::string::npos) << describe(r);
}

// A directory of text files: each regular file is read, in name order.
TEST(TrainData, GptTrainsOnADirectoryOfTextFiles) {
  TempDir dir;
  const fs::path corpus = dir.file("corpus");
  fs::create_directories(corpus);
  for (int f = 0; f < 3; ++f) {
    std::string text;
    while (text.size() < 8000)
      text += "file " + std::to_string(f) + " line " + std::to_string(text.size()) + "\n";
    write_text((corpus / ("part" + std::to_string(f) + ".txt")).string(), text);
  }
  const auto r = train_on(dir, "gpt", corpus.string());
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("done: 2 steps"), std::string::npos) << describe(r);
}

// Writes the gunzipped bytes of `gz` to `out`.
void gunzip(const std::string& gz, const std::string& out) {
  gzFile f = gzopen(gz.c_str(), "rb");
  ASSERT_NE(f, nullptr) << gz;
  std::string bytes;
  char buf[1 << 16];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) bytes.append(buf, static_cast<size_t>(n));
  gzclose(f);
  write_text(out, bytes);
}

TEST(TrainData, CnnTrainsOnACopyOfTheIdxFiles) {
  if (!fs::exists(fs::path(kMnist) / "train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Debian's dataset-fashion-mnist is not installed";
  }
  TempDir dir;
  const fs::path data = dir.file("idx");
  fs::create_directories(data);
  const fs::path mnist(kMnist);
  for (const char* name : {"train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz"}) {
    fs::copy_file(mnist / name, data / name);
  }
  // One file plain: gzip or not, both are read.
  gunzip((mnist / "train-labels-idx1-ubyte.gz").string(),
         (data / "train-labels-idx1-ubyte").string());
  const auto r = train_on(dir, "cnn", data.string());
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("done: 2 steps"), std::string::npos) << describe(r);
}

TEST(TrainData, BadPathIsOneLineNamingIt) {
  TempDir dir;
  for (const auto& [model, path] : std::vector<std::pair<std::string, std::string>>{
           {"gpt", dir.file("missing.txt")}, {"cnn", dir.file("no_idx")}, {"mlp", dir.path()}}) {
    const auto r = train_on(dir, model, path);
    expect_one_line_refusal(r, {path});
  }
}

}  // namespace
}  // namespace zoff::cli_test::train_data_test
