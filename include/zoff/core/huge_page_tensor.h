// CPU tensors whose storage is a mapping of its own on transparent huge pages (huge_pages.h).
#pragma once

#include <torch/torch.h>

namespace zoff {

// An uninitialised CPU tensor of `sizes` and `options` whose storage, when it takes at
// least kHugePageBytes, is a 2 MiB-aligned mapping advised for THP before its first touch
// (freed with the tensor); smaller ones come from torch::empty. For weights read once per
// use from DRAM (generation): 4 KiB pages cost a quarter of a one-row product's read
// bandwidth here (bench/bench_gemv.cpp: ~24 GB/s on 4 KiB pages, ~31 on 2 MiB ones).
torch::Tensor empty_on_huge_pages(at::IntArrayRef sizes, const torch::TensorOptions& options);

}  // namespace zoff
