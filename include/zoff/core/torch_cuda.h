// Loading LibTorch's CUDA library into a program that links only its CPU library.
#pragma once

#include <string>

namespace zoff {

// zoff links LibTorch's CPU library only, so its binaries start (and its tests run) without
// loading CUDA's libraries. A program that wants a GPU calls this first: it loads
// libtorch_cuda.so from the directory of the libtorch_cpu.so in use (the same LibTorch),
// which registers LibTorch's CUDA kernels and streams. Idempotent. Returns "" when CUDA can
// be used (a GPU is visible), else one line saying why not (library missing, no driver, no
// GPU). A Python process has it loaded already (import torch).
std::string load_torch_cuda();

// The number of CUDA devices visible, 0 when load_torch_cuda() failed.
int cuda_device_count();

}  // namespace zoff
