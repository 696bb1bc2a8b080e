// Export of a checkpoint's parameters to one .safetensors file, streamed tensor by tensor.
#pragma once

#include <cstdint>
#include <string>

namespace zoff::checkpoint {

struct ExportSummary {
  std::string checkpoint_dir;  // the resolved step directory
  int64_t tensors = 0;
  int64_t elements = 0;
  uint64_t file_bytes = 0;
};

// Writes every parameter of the checkpoint at `dir_or_root` to `out_path` in the
// safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// {"<name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {...}} padded with spaces to a multiple of 8 bytes, then the raw
// little-endian data, tensors in module registration order with contiguous offsets.
// Names are the module's parameter names. One tensor is in memory at a time; the rank
// files are checked (length, CRC32) first; the output is written atomically.
// A bad checkpoint or an unwritable output path is a zoff::UsageError.
ExportSummary export_safetensors(const std::string& dir_or_root, const std::string& out_path);

}  // namespace zoff::checkpoint
