// Reads whole parameters back out of a checkpoint's per-rank shard files, one at a time,
// without the engine and at any world size (export, generation, inspection).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "zoff/checkpoint/checkpoint.h"
#include "zoff/checkpoint/rank_file.h"

namespace zoff::checkpoint {

class CheckpointReader {
 public:
  // Resolves `dir_or_root` (see resolve_checkpoint_dir), reads meta.json and checks every
  // rank file: length and CRC32 against meta.json (one streaming pass each), header, and a
  // "master" section of shard_size fp32 elements. Any problem is a zoff::UsageError naming
  // the file.
  explicit CheckpointReader(const std::string& dir_or_root);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const CheckpointInfo& info() const { return info_; }

  // Elements [offset, offset + count) of the flat fp32 parameter buffer into `out`. Each
  // layout region splits among the ranks (rank r holds its r-th piece, at the region's
  // shard_offset of its file's master), so a range may span several files.
  void read_flat(int64_t offset, int64_t count, float* out) const;

  // One parameter as a new fp32 tensor of its shape (the only memory it allocates).
  torch::Tensor read_param(const partition::ParamSlot& slot) const;

  // The slot named `name`; a missing one is a zoff::UsageError.
  const partition::ParamSlot& slot(const std::string& name) const;

  // A frozen parameter or buffer as a new tensor of its stored dtype (from rank 0's file).
  torch::Tensor read_replicated(const ReplicatedEntry& entry) const;
  // Any tensor a module registers, by name: a trainable parameter (fp32), a tied second
  // name (its first name's values), a frozen parameter or a buffer (stored dtype).
  // nullptr-like (undefined) when the checkpoint has no such name.
  torch::Tensor read_named(const std::string& name) const;

 private:
  CheckpointInfo info_;
  std::vector<int> fds_;  // one open descriptor per rank file
  std::vector<std::string> paths_;
  std::vector<uint64_t> master_start_;  // bytes: file offset of each rank's "master" section
  RankFileHeader header0_;              // rank 0's: where its replicated sections are
};

}  // namespace zoff::checkpoint
