// Reader for the IDX format of (Fashion-)MNIST, plain or gzip-compressed.
#pragma once

#include <torch/torch.h>

#include <string>

namespace zoff::data {

// IDX magic numbers (big-endian): 0x00000803 = unsigned bytes, 3 dimensions (images);
// 0x00000801 = unsigned bytes, 1 dimension (labels).
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;

// Reads an IDX image file: returns uint8 [count, rows, cols]. A gzip file (known by its
// magic; a path ending in ".gz" must be one) is inflated with zlib, any other file read as
// plain IDX. A missing file, a file that is not gzip but named .gz, a corrupt or truncated
// gzip stream, a wrong magic number, zero sizes, or a payload shorter or longer than the
// header says are each a one-line zoff::UsageError naming the file and the problem. A gzip
// stream is never inflated beyond the size the header declares: a header that disagrees with
// the gzip trailer (ISIZE) or exceeds 1032 times the file size is refused before the payload
// is inflated, and more data than declared is refused one byte past the declared size.
torch::Tensor read_idx_images(const std::string& path);

// Reads an IDX label file: returns uint8 [count]. Same checks as read_idx_images.
torch::Tensor read_idx_labels(const std::string& path);

}  // namespace zoff::data
