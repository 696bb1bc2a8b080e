// Tensors on mappings of their own, advised for transparent huge pages.
#include "zoff/core/huge_page_tensor.h"

#include <c10/util/accumulate.h>

#include "zoff/core/error.h"
#include "zoff/core/huge_pages.h"
#include "zoff/core/own_mapping.h"

namespace zoff {

torch::Tensor empty_on_huge_pages(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  ZOFF_CHECK(options.device().is_cpu(), "empty_on_huge_pages: device ", options.device(),
             " is not the CPU");
  const int64_t numel = c10::multiply_integers(sizes);
  const auto dtype = options.dtype().toScalarType();
  if (static_cast<size_t>(numel) * c10::elementSize(dtype) < kHugePageBytes) {
    return torch::empty(sizes, options);
  }
  return zeros_in_own_mapping(numel, dtype).view(sizes);  // 2 MiB-aligned, THP-advised
}

}  // namespace zoff
