// Byte-level language-modelling data from a text: the corpus of Debian's `fortunes`
// package, cut into fixed windows of seq_len + 1 bytes.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "zoff/data/dataset.h"

namespace zoff::data {

// Where Debian's `fortunes` package puts its plain-text files.
inline constexpr const char* kFortunesDefaultDir = "/usr/share/games/fortunes";
// Share of the corpus (the last bytes) held out for validation.
inline constexpr double kFortunesValFraction = 0.05;

// Sample i is the window of seq_len + 1 bytes at byte offset i * seq_len of the text
// (windows overlap by one byte): inputs = its first seq_len bytes, targets = its last
// seq_len bytes (the next byte at every position). Both int64 [B, seq_len] with values in
// [0, 256): bytes are the tokens (vocab 256). size() = (bytes - 1) / seq_len.
class FortunesText : public Dataset {
 public:
  // seq_len >= 1 and a text of at least seq_len + 1 bytes, else zoff::UsageError.
  FortunesText(const std::string& text, int64_t seq_len);

  int64_t size() const override { return size_; }
  Batch get(const std::vector<int64_t>& indices) const override;

  int64_t seq_len() const { return seq_len_; }
  int64_t num_bytes() const { return bytes_.numel(); }

 private:
  torch::Tensor bytes_;  // uint8 [num_bytes], the text
  int64_t seq_len_;
  int64_t size_;
};

// The whole corpus, in a fixed order: the regular files of `dir` sorted by name, skipping
// the strfile indexes (*.dat), the *.u8 names, symlinks and directories, concatenated
// byte for byte. `dir` may also be one regular file: its bytes. A missing path, or one
// without text, is a zoff::UsageError naming it.
std::string read_fortunes_text(const std::string& dir = kFortunesDefaultDir);

struct FortunesSplit {
  std::string text;                     // the whole corpus (e.g. for prompts)
  std::shared_ptr<FortunesText> train;  // the first (1 - val_fraction) of the bytes
  std::shared_ptr<FortunesText> val;    // the last val_fraction of the bytes
};

// Reads the corpus of `dir` and splits it by bytes into train and validation windows.
// val_fraction in (0, 1); both parts must hold at least one window, else UsageError.
FortunesSplit load_fortunes(const std::string& dir, int64_t seq_len,
                            double val_fraction = kFortunesValFraction);

}  // namespace zoff::data
