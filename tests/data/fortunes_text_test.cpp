// Tests of the fortunes byte-level dataset: real corpus windows, file selection and order,
// the train/validation split, and clean errors for missing or empty directories.
#include "zoff/data/fortunes_text.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "zoff/core/error.h"

namespace zoff::data::fortunes_text_test {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("zoff_fortunes_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

TEST(FortunesText, RealCorpusWindowsAreShiftedBytes) {
  if (!fs::is_directory(kFortunesDefaultDir)) GTEST_SKIP() << "fortunes not installed";
  const int64_t T = 64;
  FortunesSplit split = load_fortunes(kFortunesDefaultDir, T);
  const auto n = int64_t(split.text.size());
  EXPECT_GT(n, 1'000'000);  // Debian's corpus is ~2.5 MB
  EXPECT_EQ(split.val->num_bytes(), int64_t(n * kFortunesValFraction));
  EXPECT_EQ(split.train->num_bytes() + split.val->num_bytes(), n);
  EXPECT_EQ(split.train->size(), (split.train->num_bytes() - 1) / T);

  const std::vector<int64_t> idx = {0, 17, split.train->size() - 1};
  Batch b = split.train->get(idx);
  ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{3, T}));
  ASSERT_EQ(b.targets.sizes(), (std::vector<int64_t>{3, T}));
  ASSERT_EQ(b.inputs.scalar_type(), torch::kInt64);
  for (size_t r = 0; r < idx.size(); ++r) {
    for (int64_t t = 0; t < T; ++t) {
      const auto at = size_t(idx[r] * T + t);
      ASSERT_EQ(b.inputs[int64_t(r)][t].item<int64_t>(), uint8_t(split.text[at]));
      ASSERT_EQ(b.targets[int64_t(r)][t].item<int64_t>(), uint8_t(split.text[at + 1]));
    }
  }
  // Validation windows start at the first held-out byte.
  Batch v = split.val->get({0});
  const size_t val_begin = size_t(split.train->num_bytes());
  EXPECT_EQ(v.inputs[0][0].item<int64_t>(), uint8_t(split.text[val_begin]));
  // The strfile index files are binary; the corpus must not contain their NUL padding.
  EXPECT_EQ(split.text.find('\0'), std::string::npos);
}

TEST(FortunesText, ReadsRegularFilesSortedSkippingIndexesAndLinks) {
  const fs::path dir = fresh_dir("select");
  write(dir / "b", "second\n%\n");
  write(dir / "a", "first\n%\n");
  write(dir / "a.dat", std::string("\0\0\0\2binary", 10));
  fs::create_symlink(dir / "a", dir / "a.u8");
  fs::create_symlink(dir / "b", dir / "c-link");
  fs::create_directories(dir / "off");
  write(dir / "off" / "x", "offensive\n");
  EXPECT_EQ(read_fortunes_text(dir.string()), "first\n%\nsecond\n%\n");
  fs::remove_all(dir);
}

// zoff train --data FILE: one regular file is the whole text.
TEST(FortunesText, ReadsOneTextFile) {
  const fs::path dir = fresh_dir("one");
  write(dir / "corpus.txt", "just this\n");
  EXPECT_EQ(read_fortunes_text((dir / "corpus.txt").string()), "just this\n");
  write(dir / "empty.txt", "");
  EXPECT_THROW(read_fortunes_text((dir / "empty.txt").string()), UsageError);
  fs::remove_all(dir);
}

TEST(FortunesText, SameIndicesSameBatch) {
  FortunesText ds("abcdefghijklmnopqrstuvwxyz", 5);
  EXPECT_EQ(ds.size(), 5);  // (26 - 1) / 5
  Batch a = ds.get({4, 1}), b = ds.get({1});
  EXPECT_TRUE(torch::equal(a.inputs[1], b.inputs[0]));
  // Window 4 = "uvwxyz": inputs "uvwxy", targets "vwxyz".
  EXPECT_EQ(a.inputs[0][0].item<int64_t>(), 'u');
  EXPECT_EQ(a.targets[0][4].item<int64_t>(), 'z');
}

TEST(FortunesText, MissingOrEmptyDirectoryIsUsageErrorNamingIt) {
  const std::string missing = "/nonexistent/zoff/fortunes";
  try {
    load_fortunes(missing, 32);
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  const fs::path empty = fresh_dir("empty");
  write(empty / "only.dat", "index");
  try {
    read_fortunes_text(empty.string());
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(empty.string()), std::string::npos) << e.what();
  }
  fs::remove_all(empty);
}

TEST(FortunesText, BadSizesAndIndicesAreUsageErrors) {
  EXPECT_THROW(FortunesText("abc", 0), UsageError);
  EXPECT_THROW(FortunesText("abc", 3), UsageError);  // needs 4 bytes for one window
  FortunesText ds("abcdefgh", 3);
  EXPECT_THROW(ds.get({ds.size()}), UsageError);
  EXPECT_THROW(ds.get({-1}), UsageError);
  const fs::path dir = fresh_dir("small");
  write(dir / "a", std::string(100, 'x'));
  EXPECT_THROW(load_fortunes(dir.string(), 10), UsageError);  // 5 held-out bytes < 11
  EXPECT_THROW(load_fortunes(dir.string(), 2, 1.5), UsageError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zoff::data::fortunes_text_test
