// Tensors on mappings of their own, advised for transparent huge pages.
#include "zoff/core/huge_page_tensor.h"

#include <c10/util/accumulate.h>

#include "zoff/core/error.h"
#include "zoff/core/huge_pages.h"
#include "zoff/core/round_up.h"

namespace zoff {

torch::Tensor empty_on_huge_pages(at::IntArrayRef sizes, const torch::TensorOptions& options) {
  ZOFF_CHECK(options.device().is_cpu(), "empty_on_huge_pages: device ", options.device(),
             " is not the CPU");
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(sizes)) *
                       c10::elementSize(options.dtype().toScalarType());
  if (bytes < kHugePageBytes) return torch::empty(sizes, options);
  const size_t mapped = round_up(bytes, kHugePageBytes);
  void* data = map_huge_aligned(mapped);
  return torch::from_blob(
      data, sizes, [mapped](void* p) { unmap_huge_aligned(p, mapped); }, options);
}

}  // namespace zoff
