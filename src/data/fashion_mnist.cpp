// Fashion-MNIST: IDX images and labels paired up, normalized on the way out.
#include "zoff/data/fashion_mnist.h"

#include <filesystem>

#include "zoff/core/error.h"
#include "zoff/data/idx_file.h"

namespace zoff::data {

FashionMnist::FashionMnist(const std::string& images_path, const std::string& labels_path)
    : images_(read_idx_images(images_path)), labels_(read_idx_labels(labels_path)) {
  ZOFF_CHECK_ARG(images_.size(0) == labels_.size(0), "fashion-mnist: ", images_path, " holds ",
                 images_.size(0), " images but ", labels_path, " holds ", labels_.size(0),
                 " labels");
  const int64_t max_label = labels_.max().item<int64_t>();
  ZOFF_CHECK_ARG(max_label < kFashionMnistClasses, "fashion-mnist: ", labels_path, ": label ",
                 max_label, " is not a class in [0, ", kFashionMnistClasses, ")");
}

Batch FashionMnist::get(const std::vector<int64_t>& indices) const {
  const int64_t n = size();
  for (int64_t i : indices) {
    ZOFF_CHECK_ARG(i >= 0 && i < n, "fashion-mnist: sample index ", i, " out of range [0, ", n,
                   ")");
  }
  const torch::Tensor idx =
      torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()), torch::kInt64);
  torch::Tensor x = images_.index_select(0, idx).to(torch::kFloat32).unsqueeze(1);  // [B,1,H,W]
  x = (x / 255.0 - kFashionMnistMean) / kFashionMnistStd;
  return {x, labels_.index_select(0, idx).to(torch::kInt64)};
}

namespace {
std::string idx_path(const std::string& dir, const std::string& name) {
  const std::filesystem::path base = std::filesystem::path(dir) / name;
  std::error_code ec;
  const std::filesystem::path gz = base.string() + ".gz";
  if (std::filesystem::exists(gz, ec)) return gz.string();
  ZOFF_CHECK_ARG(std::filesystem::exists(base, ec), "fashion-mnist: neither ", gz.string(), " nor ",
                 base.string(), " exists (install dataset-fashion-mnist?)");
  return base.string();
}
}  // namespace

FashionMnistSplit load_fashion_mnist(const std::string& dir) {
  std::error_code ec;
  ZOFF_CHECK_ARG(std::filesystem::is_directory(dir, ec), "fashion-mnist: ", dir,
                 " is not a directory (install dataset-fashion-mnist?)");
  FashionMnistSplit split;
  split.train = std::make_shared<FashionMnist>(idx_path(dir, "train-images-idx3-ubyte"),
                                               idx_path(dir, "train-labels-idx1-ubyte"));
  split.test = std::make_shared<FashionMnist>(idx_path(dir, "t10k-images-idx3-ubyte"),
                                              idx_path(dir, "t10k-labels-idx1-ubyte"));
  return split;
}

}  // namespace zoff::data
