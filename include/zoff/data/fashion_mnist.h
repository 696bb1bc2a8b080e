// The Fashion-MNIST image classification dataset (Debian's dataset-fashion-mnist).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "zoff/data/dataset.h"

namespace zoff::data {

// Where Debian's dataset-fashion-mnist package puts its IDX files.
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
// Per-pixel normalization applied by get(): x = (byte / 255 - mean) / std, with the mean
// and standard deviation of all training-set pixels scaled to [0, 1].
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;
inline constexpr int64_t kFashionMnistClasses = 10;

// Images with their labels. get() returns inputs float32 [B, 1, rows, cols] (normalized as
// above) and targets int64 [B] in [0, 10).
class FashionMnist : public Dataset {
 public:
  // Reads both IDX files (see idx_file.h); besides their own checks, differing image and
  // label counts or a label >= 10 are a zoff::UsageError naming the files.
  FashionMnist(const std::string& images_path, const std::string& labels_path);

  int64_t size() const override { return images_.size(0); }
  Batch get(const std::vector<int64_t>& indices) const override;

  const torch::Tensor& images() const { return images_; }  // uint8 [N, rows, cols]
  const torch::Tensor& labels() const { return labels_; }  // uint8 [N]

 private:
  torch::Tensor images_;
  torch::Tensor labels_;
};

struct FashionMnistSplit {
  std::shared_ptr<FashionMnist> train;  // train-{images-idx3,labels-idx1}-ubyte[.gz], 60000
  std::shared_ptr<FashionMnist> test;   // t10k-{images-idx3,labels-idx1}-ubyte[.gz], 10000
};

// Loads both sets from `dir`, taking each file as <name>.gz if present, else <name>.
// A missing directory or file is a zoff::UsageError naming the path.
FashionMnistSplit load_fashion_mnist(const std::string& dir = kFashionMnistDefaultDir);

}  // namespace zoff::data
