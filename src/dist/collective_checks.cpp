// Argument rules shared by every Comm backend.
#include "collective_checks.h"

#include "zoff/core/error.h"

namespace zoff::dist {

torch::Tensor flat_view(const torch::Tensor& tensor, const char* op, const char* name) {
  ZOFF_CHECK(tensor.defined(), op, ": ", name, " is an undefined tensor");
  ZOFF_CHECK(tensor.device().is_cpu(), op, ": ", name, " is on ", tensor.device(),
             "; zoff's communicators move CPU tensors");
  ZOFF_CHECK(tensor.is_contiguous(), op, ": ", name, " of shape ", tensor.sizes(),
             " is not contiguous");
  return tensor.view({-1});
}

void check_reducible(torch::ScalarType dtype, const char* op) {
  switch (dtype) {
    case torch::kFloat:
    case torch::kDouble:
    case torch::kInt:
    case torch::kLong:
    case torch::kChar:
    case torch::kByte:
      return;
    case torch::kBFloat16:
    case torch::kHalf:
      throw Error(detail::concat(op, ": Gloo cannot sum ", dtype,
                                 " tensors; reduce an fp32 copy instead (reduce_scatter_sum "
                                 "accepts 16-bit input and accumulates in fp32)"));
    default:
      throw Error(detail::concat(op, ": cannot sum tensors of dtype ", dtype,
                                 "; use fp32, fp64, int8, uint8, int32 or int64"));
  }
}

void check_reduce_scatter(const torch::Tensor& input, const torch::Tensor& output, int size) {
  const char* op = "reduce_scatter_sum";
  ZOFF_CHECK(input.numel() == output.numel() * size, op, ": input has ", input.numel(),
             " elements but needs size() * output.numel() = ", size, " * ", output.numel(), " = ",
             output.numel() * size);
  const auto dtype = input.scalar_type();
  const auto acc = accumulate_dtype(dtype);
  // 16-bit floats only travel; the sum itself runs in fp32.
  if (dtype != torch::kBFloat16 && dtype != torch::kHalf) check_reducible(dtype, op);
  ZOFF_CHECK(output.scalar_type() == input.scalar_type() || output.scalar_type() == acc, op,
             ": output dtype ", output.scalar_type(), " must be the input's (", input.scalar_type(),
             ") or the accumulation dtype (", acc, ")");
}

void check_reduce_scatter_v(const torch::Tensor& input, const std::vector<int64_t>& split_sizes,
                            const torch::Tensor& output, int size, int rank) {
  const char* op = "reduce_scatter_sum_v";
  ZOFF_CHECK(static_cast<int>(split_sizes.size()) == size, op, ": ", split_sizes.size(),
             " split sizes for a world of ", size);
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    ZOFF_CHECK(s >= 0, op, ": negative split size ", s);
    total += s;
  }
  ZOFF_CHECK(total == input.numel(), op, ": split sizes add up to ", total, " but input has ",
             input.numel(), " elements");
  ZOFF_CHECK(output.numel() == split_sizes[static_cast<size_t>(rank)], op, ": output has ",
             output.numel(), " elements but rank ", rank, "'s piece has ",
             split_sizes[static_cast<size_t>(rank)]);
  // The dtype rules are the even form's; reuse them on a matching even shape.
  check_reduce_scatter(input.narrow(0, 0, 0), output.narrow(0, 0, 0), size);
}

void check_all_gather(const torch::Tensor& input, const torch::Tensor& output, int size) {
  const char* op = "all_gather";
  ZOFF_CHECK(output.numel() == input.numel() * size, op, ": output has ", output.numel(),
             " elements but needs size() * input.numel() = ", size, " * ", input.numel(), " = ",
             input.numel() * size);
  ZOFF_CHECK(output.scalar_type() == input.scalar_type(), op, ": output dtype ",
             output.scalar_type(), " differs from input dtype ", input.scalar_type());
}

void check_root(int root, int size, const char* op) {
  ZOFF_CHECK(root >= 0 && root < size, op, ": root ", root, " is not a rank of a world of ", size);
}

}  // namespace zoff::dist
