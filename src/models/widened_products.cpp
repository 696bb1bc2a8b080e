// 16-bit matrix products with fp32 operands and accumulation, rounded once to the 16-bit type.
#include "zoff/models/widened_products.h"

#include <ATen/ExpandUtils.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "bf16_bits.h"
#include "gemv_kernels.h"
#include "zoff/core/error.h"
#include "zoff/models/native_bf16_linear.h"

namespace zoff::models {
namespace {

std::atomic<Bf16Products> g_bf16_mode{Bf16Products::kAuto};

// Hardware bf16 dot products (what oneDNN's fast bf16 GEMM needs). GCC's cpu model knows
// both names from GCC 12 (Debian 12's compiler); elsewhere assume none.
bool cpu_multiplies_bf16() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
#elif defined(__aarch64__)
  return true;  // Arm's BF16 extension: let ATen (oneDNN / ACL) decide
#else
  return false;
#endif
}

Bf16Products from_environment() {
  const char* v = std::getenv("ZOFF_BF16_PRODUCTS");
  if (v == nullptr || *v == '\0') return Bf16Products::kAuto;
  const std::string_view s(v);
  if (s == "auto") return Bf16Products::kAuto;
  if (s == "native") return Bf16Products::kNative;
  if (s == "widened") return Bf16Products::kWidened;
  throw UsageError("ZOFF_BF16_PRODUCTS=" + std::string(s) + ": expected auto, native or widened");
}

// ZOFF_BF16_PRODUCTS, read once.
Bf16Products environment_choice() {
  static const Bf16Products env = from_environment();
  return env;
}

bool resolve_auto() {
  static const bool widened = [] {
    const Bf16Products env = environment_choice();
    if (env != Bf16Products::kAuto) return env == Bf16Products::kWidened;
    return !cpu_multiplies_bf16();
  }();
  return widened;
}

torch::Tensor wide(const torch::Tensor& t) { return t.defined() ? t.to(torch::kFloat32) : t; }

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The functions below save their 16-bit operands, as LibTorch's own 16-bit ops do, and
// widen them again in backward. Autograd through the casts would instead keep the fp32
// copies alive from forward to backward: twice the 16-bit weights of every layer (stage 3
// gathers and frees a unit's parameters around its forward; its fp32 copies would stay)
// and twice the saved activations.

// Products with a 16-bit weight w [N, K] whose fp32 copy, or whose fp32 product with the
// M rows of x, would exceed kWideChunkBytes are taken a chunk of w's rows at a time, in
// fp32 scratch kept per thread. Widening such a weight whole allocated and freed fp32 blocks
// of the weight's size (and of the product's, and of its gradient's) around every product:
// glibc's heap, which a run with room keeps for speed (core/heap_policy.h), grew on that
// churn to twice the peak RSS of LibTorch's own bf16 products (gpt medium, stage 3 with
// everything on disk: 924 MB against 431 on an AVX2 EPYC, 2026-12-02).
constexpr int64_t kWideChunkBytes = int64_t{4} << 20;

// Rows of w [N, K] per chunk for a product with M rows: as many as keep both the widened
// chunk [rows, K] and the product's block [M, rows] within kWideChunkBytes (at least one).
int64_t chunk_rows(int64_t K, int64_t M) {
  const int64_t row_bytes = std::max<int64_t>({K, M, 1}) * int64_t{sizeof(float)};
  return std::max<int64_t>(1, kWideChunkBytes / row_bytes);
}

// Whether x [..., K] @ w^T, w [N, K], goes by chunks (else: one product, as LibTorch's op).
bool chunks_weight(const torch::Tensor& x, const torch::Tensor& w) {
  const int64_t K = w.size(1);
  return w.size(0) > chunk_rows(K, K == 0 ? 0 : x.numel() / K);
}

// Three fp32 buffers per thread, grown to the largest chunk asked for and then reused: the
// widened weight chunk, the [M, rows] block (forward's product, backward's widened
// gradient) and backward's weight-gradient chunk. At most 3 x kWideChunkBytes per thread
// that multiplies (unless one row of w, or M, alone passes it); no view of them outlives the
// product that took it.
class WideScratch {
 public:
  enum Slot { kWeight, kRowsBlock, kWeightGrad, kSlots };
  // A contiguous fp32 [rows, cols] view of `slot`.
  torch::Tensor view(Slot slot, int64_t rows, int64_t cols) {
    torch::Tensor& buf = buffers_[slot];
    if (!buf.defined() || buf.numel() < rows * cols) buf = torch::empty({rows * cols});
    return buf.narrow(0, 0, rows * cols).view({rows, cols});
  }

 private:
  std::array<torch::Tensor, kSlots> buffers_;
};

WideScratch& wide_scratch() {
  thread_local WideScratch scratch;
  return scratch;
}

// `src` [rows, cols] widened into `slot`.
torch::Tensor wide_into(WideScratch::Slot slot, const torch::Tensor& src) {
  return wide_scratch().view(slot, src.size(0), src.size(1)).copy_(src);
}

// x @ w^T + b by chunks of w's rows, x [..., K] (M rows in all), w [N, K], b [N] or
// undefined: each chunk is widened, multiplied and rounded into its columns of the 16-bit
// output [..., N].
torch::Tensor chunked_forward(const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& b) {
  const torch::Tensor xw = wide(x.reshape({-1, w.size(1)}));  // [M, K]
  const int64_t M = xw.size(0), N = w.size(0), rows = chunk_rows(w.size(1), M);
  torch::Tensor y = torch::empty({M, N}, x.options());
  for (int64_t n0 = 0; n0 < N; n0 += rows) {
    const int64_t n = std::min(rows, N - n0);
    const torch::Tensor wc = wide_into(WideScratch::kWeight, w.narrow(0, n0, n));  // [n, K]
    torch::Tensor yc = wide_scratch().view(WideScratch::kRowsBlock, M, n);         // [M, n]
    if (b.defined()) {
      yc.copy_(b.narrow(0, n0, n).unsqueeze(0).expand({M, n}));
      yc.addmm_(xw, wc.t());
    } else {
      torch::mm_out(yc, xw, wc.t());
    }
    y.narrow(1, n0, n).copy_(yc);
  }
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = N;
  return y.view(sizes);
}

// Gradients of chunked_forward from g [..., N], over the same chunks: gx (x's shape) sums
// every chunk's g_c @ w_c in fp32 and is rounded once at the end; gw's [N, K] and gb's rows
// are each one chunk's sum, rounded into place. `needed`: x, w, b; what is not needed stays
// undefined.
struct ChunkedGrads {
  torch::Tensor gx, gw, gb;
};
ChunkedGrads chunked_backward(const torch::Tensor& g, const torch::Tensor& x,
                              const torch::Tensor& w, c10::ScalarType bias_dtype,
                              std::array<bool, 3> needed) {
  const int64_t N = w.size(0), K = w.size(1);
  const torch::Tensor g2 = g.reshape({-1, N});  // [M, N]
  const int64_t M = g2.size(0), rows = chunk_rows(K, M);
  const torch::Tensor xw = needed[1] ? wide(x.reshape({-1, K})) : torch::Tensor();  // [M, K]
  torch::Tensor gx = needed[0] ? torch::zeros({M, K}) : torch::Tensor();
  ChunkedGrads out;
  if (needed[1]) out.gw = torch::empty({N, K}, w.options());
  if (needed[2]) out.gb = torch::empty({N}, w.options().dtype(bias_dtype));
  for (int64_t n0 = 0; n0 < N; n0 += rows) {
    const int64_t n = std::min(rows, N - n0);
    const torch::Tensor gc = wide_into(WideScratch::kRowsBlock, g2.narrow(1, n0, n));  // [M, n]
    if (needed[0]) gx.addmm_(gc, wide_into(WideScratch::kWeight, w.narrow(0, n0, n)));
    if (needed[1]) {
      torch::Tensor gwc = wide_scratch().view(WideScratch::kWeightGrad, n, K);
      out.gw.narrow(0, n0, n).copy_(torch::mm_out(gwc, gc.t(), xw));
    }
    if (needed[2]) out.gb.narrow(0, n0, n).copy_(gc.sum(0));
  }
  if (needed[0]) out.gx = gx.view(x.sizes()).to(x.scalar_type());
  return out;
}

// x @ w^T + b: x [..., in], w [out, in], b [out].
struct WidenedLinearFn : torch::autograd::Function<WidenedLinearFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["bias_dtype"] = static_cast<int64_t>(b.scalar_type());
    if (chunks_weight(x, w)) return chunked_forward(x, w, b);
    return torch::linear(wide(x), wide(w), wide(b)).to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const auto bias_dtype = static_cast<c10::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
    if (chunks_weight(x, w)) {
      const auto r = chunked_backward(
          grads[0], x, w, bias_dtype,
          {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)});
      return {r.gx, r.gw, r.gb};
    }
    const torch::Tensor g = wide(grads[0]).reshape({-1, w.size(0)});  // [rows, out]
    torch::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) gx = torch::mm(g, wide(w)).view(x.sizes()).to(x.scalar_type());
    if (ctx->needs_input_grad(1)) {
      gw = torch::mm(g.t(), wide(x).reshape({-1, w.size(1)})).to(w.scalar_type());
    }
    if (ctx->needs_input_grad(2)) {
      gb = g.sum(0).to(bias_dtype);
    }
    return {gx, gw, gb};
  }
};

// a @ b with a [..., M, K] and b [..., K, N] (batch dimensions broadcast, b may be 2-D).
struct WidenedMatmulFn : torch::autograd::Function<WidenedMatmulFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a,
                               const torch::Tensor& b) {
    ctx->save_for_backward({a, b});
    // A 2-D b is a weight (x @ w^T, the tied head's x @ wte^T): its transpose is w [N, K].
    if (b.dim() == 2 && chunks_weight(a, b.t())) return chunked_forward(a, b.t(), torch::Tensor());
    return torch::matmul(wide(a), wide(b)).to(a.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& a = saved[0];
    const torch::Tensor& b = saved[1];
    if (b.dim() == 2 && chunks_weight(a, b.t())) {
      const auto r = chunked_backward(grads[0], a, b.t(), b.scalar_type(),
                                      {ctx->needs_input_grad(0), ctx->needs_input_grad(1), false});
      return {r.gx, r.gw.defined() ? r.gw.t() : r.gw};
    }
    const torch::Tensor g = wide(grads[0]);  // [..., M, N]
    torch::Tensor ga, gb;
    if (ctx->needs_input_grad(0)) {
      ga = at::sum_to(torch::matmul(g, wide(b).transpose(-1, -2)), a.sizes()).to(a.scalar_type());
    }
    if (ctx->needs_input_grad(1)) {
      // A 2-D b is shared by every batch entry: one GEMM over all rows instead of a
      // [..., K, N] product per entry summed afterwards.
      gb = b.dim() == 2
               ? torch::mm(wide(a).reshape({-1, a.size(-1)}).t(), g.reshape({-1, g.size(-1)}))
               : at::sum_to(torch::matmul(wide(a).transpose(-1, -2), g), b.sizes());
      gb = gb.to(b.scalar_type());
    }
    return {ga, gb};
  }
};

// beta c + alpha (a @ b) with a [B, M, K], b [B, K, N], c broadcastable to [B, M, N].
struct WidenedBaddbmmFn : torch::autograd::Function<WidenedBaddbmmFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& c, const torch::Tensor& a,
                               const torch::Tensor& b, double beta, double alpha) {
    ctx->save_for_backward({a, b});
    ctx->saved_data["beta"] = beta;
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["c_sizes"] = c.sizes().vec();
    ctx->saved_data["c_dtype"] = static_cast<int64_t>(c.scalar_type());
    return torch::baddbmm(wide(c), wide(a), wide(b), beta, alpha).to(a.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& a = saved[0];
    const torch::Tensor& b = saved[1];
    const double beta = ctx->saved_data["beta"].toDouble();
    const double alpha = ctx->saved_data["alpha"].toDouble();
    const torch::Tensor g = wide(grads[0]);  // [B, M, N]
    torch::Tensor gc, ga, gb;
    if (ctx->needs_input_grad(0)) {
      gc = at::sum_to(g * beta, ctx->saved_data["c_sizes"].toIntVector())
               .to(static_cast<c10::ScalarType>(ctx->saved_data["c_dtype"].toInt()));
    }
    if (ctx->needs_input_grad(1))
      ga = (torch::bmm(g, wide(b).transpose(1, 2)) * alpha).to(a.scalar_type());
    if (ctx->needs_input_grad(2))
      gb = (torch::bmm(wide(a).transpose(1, 2), g) * alpha).to(b.scalar_type());
    return {gc, ga, gb, torch::Tensor(), torch::Tensor()};
  }
};

// Output columns per parallel chunk of a one-row product (each reads GemvGrain rows of
// the weight, e.g. 256 x 2048 bf16 = 1 MiB).
constexpr int64_t kGemvGrain = 256;

// The process-wide choice where it is pinned (kNative: false, kWidened: true), else
// if_auto().
template <class IfAuto>
bool pinned_or(IfAuto if_auto) {
  switch (g_bf16_mode.load()) {
    case Bf16Products::kNative:
      return false;
    case Bf16Products::kWidened:
      return true;
    case Bf16Products::kAuto:
      break;
  }
  return if_auto();
}

// Whether few-row products without autograd take zoff's kernel: in every choice but an
// explicit native one (LibTorch's products, as ZOFF_BF16_PRODUCTS=native promises).
bool few_row_kernel_enabled() {
  return pinned_or([] { return environment_choice() != Bf16Products::kNative; });
}

// Products of a few rows without autograd (generation: one position at a time): bound by
// reading the weight from DRAM, so the kernel reads each bf16 weight once, with fp32 sums
// rounded once to bf16, asking for the weight's lines ahead of use (gemv_kernels.h). On a
// CPU with bf16 dot products too, where LibTorch's one-row product (oneDNN) read weights at
// 26.6 GiB/s against this kernel's 30.0 (bench/bench_gemv.cpp, 2 threads). Widening the whole
// weight to fp32 first (the widened GEMM) would move 2 + 4 + 4 bytes per weight instead of 2.
// Contiguous bf16 weight [N, K], x [..., K].
bool gemv_applies(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  if (torch::GradMode::is_enabled() || !x.is_cpu() || x.scalar_type() != torch::kBFloat16 ||
      w.scalar_type() != torch::kBFloat16 || w.dim() != 2 || !w.is_contiguous() || x.dim() < 1 ||
      x.size(-1) != w.size(1) || w.size(1) == 0 || !w.is_cpu()) {
    return false;
  }
  if (b.defined() && (b.scalar_type() != torch::kBFloat16 || !b.is_contiguous() || b.dim() != 1 ||
                      b.size(0) != w.size(0))) {
    return false;
  }
  return x.numel() / w.size(1) <= static_cast<int64_t>(detail::kGemvMaxRows) && x.numel() > 0;
}

torch::Tensor gemv_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  const int64_t N = w.size(0), K = w.size(1);
  const torch::Tensor rows = x.reshape({-1, K}).contiguous();  // bf16 [R, K]
  torch::Tensor y = torch::empty({rows.size(0), N}, rows.options().dtype(torch::kFloat32));
  const uint16_t* wp = detail::bf16_bits(w);
  const uint16_t* bp = b.defined() ? detail::bf16_bits(b) : nullptr;
  const uint16_t* xp = detail::bf16_bits(rows);
  float* yp = y.data_ptr<float>();  // [R, N]
  const auto R = static_cast<size_t>(rows.size(0));
  at::parallel_for(0, N, kGemvGrain, [&](int64_t n0, int64_t n1) {
    detail::bf16_gemv(wp, xp, bp, R, static_cast<size_t>(N), static_cast<size_t>(K),
                      static_cast<size_t>(n0), static_cast<size_t>(n1), yp);
  });
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = N;
  return y.to(torch::kBFloat16).view(sizes);
}

}  // namespace

void set_bf16_products(Bf16Products mode) { g_bf16_mode.store(mode); }

bool bf16_products_widened() { return pinned_or(resolve_auto); }

std::string bf16_products_name() { return bf16_products_widened() ? "widened" : "native"; }

bool widens(const torch::Tensor& operand) {
  // A GPU multiplies 16-bit operands natively (tensor cores, fp32 accumulation).
  if (!operand.defined() || !operand.is_cpu()) return false;
  if (operand.scalar_type() == torch::kHalf) return true;
  return operand.scalar_type() == torch::kBFloat16 && bf16_products_widened();
}

torch::Tensor widened_linear(const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor& b) {
  if (x.scalar_type() == torch::kBFloat16 && few_row_kernel_enabled() && gemv_applies(x, w, b)) {
    return gemv_linear(x, w, b);
  }
  if (!widens(x)) {
    if (native_bf16_linear_applies(x, w, b)) return native_bf16_linear(x, w, b);
    return torch::linear(x, w, b);
  }
  // A custom function's tensor inputs must be defined: without a bias, x @ w^T.
  return b.defined() ? WidenedLinearFn::apply(x, w, b) : WidenedMatmulFn::apply(x, w.t());
}

torch::Tensor widened_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  if (!widens(a)) return torch::matmul(a, b);
  TORCH_CHECK(a.dim() >= 2 && b.dim() >= 2, "widened_matmul: operands need two or more dimensions");
  return WidenedMatmulFn::apply(a, b);
}

torch::Tensor widened_bmm(const torch::Tensor& a, const torch::Tensor& b) {
  if (!widens(a)) return torch::bmm(a, b);
  TORCH_CHECK(a.dim() == 3 && b.dim() == 3, "widened_bmm: operands must be 3-D");
  return WidenedMatmulFn::apply(a, b);
}

torch::Tensor widened_baddbmm(const torch::Tensor& c, const torch::Tensor& a,
                              const torch::Tensor& b, double beta, double alpha) {
  if (!widens(a)) return torch::baddbmm(c, a, b, beta, alpha);
  return WidenedBaddbmmFn::apply(c, a, b, beta, alpha);
}

}  // namespace zoff::models
