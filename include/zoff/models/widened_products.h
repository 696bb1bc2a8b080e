// Matrix products of 16-bit activations computed in fp32, as GPU tensor cores compute them.
#pragma once

#include <torch/torch.h>

#include <string>

namespace zoff::models {

// LibTorch's CPU GEMMs in 16-bit floats are fast only where the CPU multiplies them natively:
// bf16 with AVX512-BF16 or AMX (~400 GFLOP/s against ~200 for fp32 on such a CPU); fp16
// with AVX512-FP16 or AMX-FP16. Elsewhere ATen falls back to a generic kernel: on an AVX2
// EPYC (2026-11-27) 768x256x768 runs at 1.2 GFLOP/s in bf16 and in fp16 against 57 in fp32.
// "Widened" products convert both operands to fp32 (exactly), multiply with fp32
// accumulation (LibTorch's fp32 GEMM) and round the product once to the 16-bit type: the
// arithmetic of a 16-bit GEMM with fp32 accumulation, as tensor cores and ATen's own
// fallback do it, up to the order of the additions. Autograd goes through the casts, so
// backward's products are widened the same way and the gradients come back in the 16-bit
// type. fp16 is always widened; bf16 per `Bf16Products`; fp32 goes straight to LibTorch.
// A product whose 2-D weight, or whose output block, would take more than 4 MiB in fp32 is
// taken a chunk of the weight's rows at a time in fp32 scratch kept per thread, so no fp32
// block of a weight's size is allocated (or left in the heap) by any product.

enum class Bf16Products {
  kAuto,     // widened unless the CPU has AVX512-BF16 or AMX-BF16 (or ZOFF_BF16_PRODUCTS says)
  kNative,   // LibTorch's bf16 GEMM, few-row products included
  kWidened,  // fp32 GEMM, rounded once
};

// Process-wide choice for bf16 (default kAuto). Benchmarks and tests pin it; users may set
// ZOFF_BF16_PRODUCTS=native|widened|auto, read when kAuto is resolved.
void set_bf16_products(Bf16Products mode);

// Whether bf16 products are widened now: kAuto resolved against the environment and the CPU.
bool bf16_products_widened();

// "native" or "widened": the resolved choice, for run reports.
std::string bf16_products_name();

// Whether a product with this operand is widened (fp16 always, bf16 per the choice above).
bool widens(const torch::Tensor& operand);

// x @ w^T + b (ATen's linear; b may be undefined). Native bf16 under autograd:
// native_bf16_linear (the weight gradient from a row-major copy of dy^T, ~2x faster).
// Without autograd, a bf16 x of at most 4 rows and a contiguous bf16 w (generation) go
// through zoff's kernel, which reads each weight once in bf16 ahead of use, with fp32 sums
// rounded once, whether bf16 is widened or not: it reads weights from DRAM faster than
// LibTorch's one-row product. kNative (or ZOFF_BF16_PRODUCTS=native) sends them to LibTorch
// too.
torch::Tensor widened_linear(const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor& b);

// a @ b (ATen's matmul, any batch shape).
torch::Tensor widened_matmul(const torch::Tensor& a, const torch::Tensor& b);

// a @ b over a batch of matrices (ATen's bmm).
torch::Tensor widened_bmm(const torch::Tensor& a, const torch::Tensor& b);

// beta c + alpha (a @ b) over a batch of matrices (ATen's baddbmm).
torch::Tensor widened_baddbmm(const torch::Tensor& c, const torch::Tensor& a,
                              const torch::Tensor& b, double beta, double alpha);

}  // namespace zoff::models
