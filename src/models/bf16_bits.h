// bf16_bits: a bf16 tensor's data as the uint16_t bit patterns the models' Highway kernels take.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace zoff::models::detail {

// The data of a bf16 tensor as bit patterns (the caller has checked its dtype and layout).
inline uint16_t* bf16_bits(const at::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr());
}

}  // namespace zoff::models::detail
