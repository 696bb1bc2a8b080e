// Tests of the IDX reader and Fashion-MNIST: the real Debian files, small generated files
// (plain and gzip), and every kind of corrupt file failing with a one-line UsageError.
#include "zoff/data/fashion_mnist.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "zoff/core/error.h"
#include "zoff/data/idx_file.h"

namespace zoff::data::fashion_mnist_test {
namespace {

namespace fs = std::filesystem;

constexpr double kNormTolerance = 1e-6;
// The gzip-bomb tests: zero bytes after a 10-image header (50 MB, about 50 KB compressed),
// and how much the reader's peak RSS may grow reading it (reading it all would be > 50 MB).
constexpr size_t kBombZeros = size_t{50} << 20;
constexpr int64_t kBombRssBound = int64_t{16} << 20;

std::string be32(uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 0xff), char((v >> 8) & 0xff), char(v & 0xff)};
}

// An IDX image file of n images rows x cols whose pixel k of image i is (i * 7 + k) % 256.
std::string idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = kIdxImagesMagic) {
  std::string s = be32(magic) + be32(n) + be32(rows) + be32(cols);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t k = 0; k < rows * cols; ++k) s += char((i * 7 + k) % 256);
  return s;
}

std::string idx_labels(uint32_t n, uint32_t magic = kIdxLabelsMagic) {
  std::string s = be32(magic) + be32(n);
  for (uint32_t i = 0; i < n; ++i) s += char(i % 10);
  return s;
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zoff_idx_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string plain(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  std::string gz(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
    return p.string();
  }
  // Expects a UsageError on one line that names the file and contains `what`.
  template <typename F>
  void expect_error(F&& f, const std::string& path, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no exception for " << path;
    } catch (const UsageError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  fs::path dir_;
};

TEST_F(IdxFiles, PlainAndGzipReadTheSame) {
  const std::string bytes = idx_images(3, 4, 5);
  torch::Tensor a = read_idx_images(plain("img", bytes));
  torch::Tensor b = read_idx_images(gz("img.gz", bytes));
  ASSERT_EQ(a.sizes(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_EQ(a[2][1][3].item<int64_t>(), (2 * 7 + 1 * 5 + 3) % 256);
  torch::Tensor l = read_idx_labels(gz("lab.gz", idx_labels(13)));
  ASSERT_EQ(l.sizes(), (std::vector<int64_t>{13}));
  EXPECT_EQ(l[12].item<int64_t>(), 2);
  // gzip is known by its magic (zlib read it so before): a gzip file not named .gz reads too,
  // with the same size checks.
  EXPECT_TRUE(torch::equal(read_idx_images(gz("img-gzipped", bytes)), a));
}

TEST_F(IdxFiles, DatasetNormalizesAndPairsLabels) {
  FashionMnist ds(plain("img", idx_images(10, 2, 2)), plain("lab", idx_labels(10)));
  Batch b = ds.get({3, 9});
  ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{2, 1, 2, 2}));
  ASSERT_EQ(b.targets.scalar_type(), torch::kInt64);
  EXPECT_EQ(b.targets[1].item<int64_t>(), 9);
  const double px = (9 * 7 + 3) % 256;  // image 9, pixel (1, 1)
  EXPECT_NEAR(b.inputs[1][0][1][1].item<double>(),
              (px / 255.0 - kFashionMnistMean) / kFashionMnistStd, kNormTolerance);
  EXPECT_THROW(ds.get({10}), UsageError);
}

TEST_F(IdxFiles, CorruptFilesAreOneLineUsageErrors) {
  const std::string good = idx_images(4, 3, 3);
  std::string p = plain("badmagic", idx_images(4, 3, 3, 0x00000804));
  expect_error([&] { read_idx_images(p); }, p, "magic number 0x00000804");
  p = plain("labels-as-images", idx_labels(4));
  expect_error([&] { read_idx_images(p); }, p, "magic");
  p = plain("truncated", good.substr(0, good.size() - 1));
  expect_error([&] { read_idx_images(p); }, p, "truncated");
  p = plain("header-only", good.substr(0, 10));
  expect_error([&] { read_idx_images(p); }, p, "truncated header");
  p = plain("trailing", good + "xx");
  expect_error([&] { read_idx_images(p); }, p, "unexpected bytes");
  p = plain("zero", idx_images(0, 3, 3));
  expect_error([&] { read_idx_images(p); }, p, "dimension 0");
  p = plain("huge", be32(kIdxImagesMagic) + be32(1u << 24) + be32(1u << 24) + be32(1u << 24));
  expect_error([&] { read_idx_images(p); }, p, "truncated");
  p = plain("empty", "");
  expect_error([&] { read_idx_images(p); }, p, "too short");
  p = plain("notgz.gz", good);
  expect_error([&] { read_idx_images(p); }, p, "not a gzip file");
  p = gz("short.gz", good.substr(0, 20));
  expect_error([&] { read_idx_images(p); }, p, "truncated");
  // A gzip stream cut in the middle.
  const std::string whole = gz("whole.gz", idx_images(200, 28, 28));
  std::ifstream in(whole, std::ios::binary);
  const std::string z((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  p = plain("cut.gz", z.substr(0, z.size() / 2));
  expect_error([&] { read_idx_images(p); }, p, "gzip");
  // Corrupt deflate data after a valid gzip header.
  std::string flipped = z;
  for (size_t i = 20; i < 60; ++i) flipped[i] = char(~flipped[i]);
  p = plain("flipped.gz", flipped);
  expect_error([&] { read_idx_images(p); }, p, "gzip");
  p = (dir_ / "missing.gz").string();
  expect_error([&] { read_idx_images(p); }, p, "cannot open");
}

TEST_F(IdxFiles, CountMismatchAndBadLabelsAreUsageErrors) {
  const std::string img = plain("img", idx_images(5, 2, 2));
  const std::string lab = plain("lab", idx_labels(4));
  expect_error([&] { FashionMnist(img, lab); }, lab, "4 labels");
  std::string bad = idx_labels(5);
  bad.back() = char(10);
  const std::string lab10 = plain("lab10", bad);
  expect_error([&] { FashionMnist(img, lab10); }, lab10, "label 10");
  expect_error([&] { load_fashion_mnist(dir_.string()); }, dir_.string(), "neither");
}

// Peak resident memory of this process so far, in bytes.
int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;
}

// Appends `zeros` zero bytes to an open gzip stream, 1 MiB at a time.
void gzwrite_zeros(gzFile f, size_t zeros) {
  const std::string chunk(size_t{1} << 20, '\0');
  for (size_t done = 0; done < zeros; done += chunk.size()) {
    gzwrite(f, chunk.data(), unsigned(std::min(chunk.size(), zeros - done)));
  }
}

// A valid header for 10 images of 28x28 followed by far more data than that: the old reader
// inflated all of it (a 2 MB file reached 4.3 GB RSS). The gzip trailer already says so, and
// the file is refused before its payload is inflated.
TEST_F(IdxFiles, GzipBombIsRefusedBeforeItIsInflated) {
  const std::string p = (dir_ / "bomb-images.gz").string();
  gzFile f = gzopen(p.c_str(), "wb9");
  const std::string header = idx_images(10, 28, 28).substr(0, 16);
  gzwrite(f, header.data(), unsigned(header.size()));
  gzwrite_zeros(f, kBombZeros);
  gzclose(f);
  ASSERT_LT(fs::file_size(p), kBombZeros / 100);  // small on disk, large inflated
  const int64_t before = peak_rss_bytes();
  expect_error([&] { read_idx_images(p); }, p, "refused without inflating it");
  EXPECT_LT(peak_rss_bytes() - before, kBombRssBound);
}

// The same bomb with its trailer made to agree with the header: a second gzip member whose
// length is the declared size, so the ISIZE of the last member (all the trailer holds) is what
// the header declares. The reader inflates the declared bytes, finds more, and stops there.
TEST_F(IdxFiles, GzipDataBeyondTheDeclaredSizeIsRefusedAfterTheDeclaredBytes) {
  const std::string p = (dir_ / "bomb2-images.gz").string();
  const std::string declared = idx_images(10, 28, 28);
  gzFile f = gzopen(p.c_str(), "wb9");
  gzwrite(f, declared.data(), unsigned(declared.size()));
  gzwrite_zeros(f, kBombZeros);
  gzclose(f);
  f = gzopen(p.c_str(), "ab9");  // appending starts a second member
  gzwrite_zeros(f, declared.size());
  gzclose(f);
  const int64_t before = peak_rss_bytes();
  expect_error([&] { read_idx_images(p); }, p, "refused without reading the rest");
  EXPECT_LT(peak_rss_bytes() - before, kBombRssBound);
}

TEST(FashionMnist, RealDebianFiles) {
  if (!fs::is_directory(kFashionMnistDefaultDir)) GTEST_SKIP() << "dataset-fashion-mnist missing";
  FashionMnistSplit split = load_fashion_mnist();
  ASSERT_EQ(split.train->size(), 60000);
  ASSERT_EQ(split.test->size(), 10000);
  EXPECT_EQ(split.train->images().sizes(), (std::vector<int64_t>{60000, 28, 28}));
  // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
  torch::Tensor train_counts = torch::bincount(split.train->labels().to(torch::kInt64));
  torch::Tensor test_counts = torch::bincount(split.test->labels().to(torch::kInt64));
  EXPECT_TRUE(torch::equal(train_counts, torch::full({10}, 6000, torch::kInt64)));
  EXPECT_TRUE(torch::equal(test_counts, torch::full({10}, 1000, torch::kInt64)));
  // The documented normalization constants are the training set's statistics.
  torch::Tensor px = split.train->images().to(torch::kFloat64) / 255.0;
  EXPECT_NEAR(px.mean().item<double>(), kFashionMnistMean, 5e-4);
  EXPECT_NEAR(px.std().item<double>(), kFashionMnistStd, 5e-4);
  Batch b = split.test->get({0, 9999});
  EXPECT_EQ(b.inputs.sizes(), (std::vector<int64_t>{2, 1, 28, 28}));
  EXPECT_EQ(b.inputs.scalar_type(), torch::kFloat32);
}

}  // namespace
}  // namespace zoff::data::fashion_mnist_test
