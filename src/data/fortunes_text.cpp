// Byte windows over the fortunes corpus, and reading that corpus from disk.
#include "zoff/data/fortunes_text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "zoff/core/error.h"

namespace zoff::data {

namespace fs = std::filesystem;

FortunesText::FortunesText(const std::string& text, int64_t seq_len) : seq_len_(seq_len) {
  ZOFF_CHECK_ARG(seq_len >= 1, "fortunes: seq_len = ", seq_len, ": must be >= 1");
  const auto n = static_cast<int64_t>(text.size());
  ZOFF_CHECK_ARG(n >= seq_len + 1, "fortunes: a text of ", n,
                 " bytes holds no window of seq_len + 1 = ", seq_len + 1, " bytes");
  bytes_ = torch::empty({n}, torch::kUInt8);
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(bytes_.data_ptr<uint8_t>()));
  size_ = (n - 1) / seq_len;
}

Batch FortunesText::get(const std::vector<int64_t>& indices) const {
  const auto batch = static_cast<int64_t>(indices.size());
  torch::Tensor windows = torch::empty({batch, seq_len_ + 1}, torch::kInt64);  // [B, T+1]
  const uint8_t* src = bytes_.data_ptr<uint8_t>();
  int64_t* dst = windows.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t i = indices[static_cast<size_t>(b)];
    ZOFF_CHECK_ARG(i >= 0 && i < size_, "fortunes: sample index ", i, " out of range [0, ", size_,
                   ")");
    const uint8_t* window = src + i * seq_len_;
    std::copy(window, window + seq_len_ + 1, dst + b * (seq_len_ + 1));
  }
  using torch::indexing::Slice;
  return {windows.index({Slice(), Slice(0, seq_len_)}).contiguous(),
          windows.index({Slice(), Slice(1, seq_len_ + 1)}).contiguous()};
}

namespace {

bool is_corpus_file(const fs::directory_entry& entry) {
  if (entry.is_symlink() || !entry.is_regular_file()) return false;
  const std::string ext = entry.path().extension().string();
  return ext != ".dat" && ext != ".u8";
}

std::string read_file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ZOFF_CHECK(in.good(), "fortunes: cannot open ", path.string());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ZOFF_CHECK(!in.bad(), "fortunes: read error in ", path.string());
  return bytes;
}

}  // namespace

std::string read_fortunes_text(const std::string& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) {  // one text file (zoff train --data FILE)
    std::string text = read_file_bytes(dir);
    ZOFF_CHECK_ARG(!text.empty(), "text: ", dir, " is empty");
    return text;
  }
  ZOFF_CHECK_ARG(fs::is_directory(dir, ec), "text: ", dir,
                 " is neither a text file nor a directory (the default needs Debian's `fortunes`"
                 " package)");
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (is_corpus_file(entry)) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());  // directory order is not deterministic
  std::string text;
  for (const fs::path& file : files) text += read_file_bytes(file);
  ZOFF_CHECK_ARG(!text.empty(), "fortunes: no text files in ", dir);
  return text;
}

FortunesSplit load_fortunes(const std::string& dir, int64_t seq_len, double val_fraction) {
  ZOFF_CHECK_ARG(val_fraction > 0.0 && val_fraction < 1.0,
                 "fortunes: validation fraction = ", val_fraction, ": must be in (0, 1)");
  FortunesSplit split;
  split.text = read_fortunes_text(dir);
  const auto n = static_cast<int64_t>(split.text.size());
  const auto n_val = static_cast<int64_t>(static_cast<double>(n) * val_fraction);
  ZOFF_CHECK_ARG(n - n_val >= seq_len + 1 && n_val >= seq_len + 1, "fortunes: ", dir, " holds ", n,
                 " bytes, too few for train and validation windows of seq_len ", seq_len);
  split.train = std::make_shared<FortunesText>(split.text.substr(0, n - n_val), seq_len);
  split.val = std::make_shared<FortunesText>(split.text.substr(n - n_val), seq_len);
  return split;
}

}  // namespace zoff::data
