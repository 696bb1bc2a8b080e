// auto_stream_buffers: the streamed-gradient window's size when the config leaves it to zoff.
#include "zoff/placement/stream_window.h"

#include <algorithm>

#include "zoff/core/error.h"

namespace zoff::placement {

int64_t auto_stream_buffers(int64_t slots, int64_t group_elems, int64_t burst_elems) {
  ZOFF_CHECK_ARG(slots >= 1, "stream window: ", slots, " step buffer sets: must be >= 1");
  ZOFF_CHECK_ARG(group_elems >= 1, "stream window: sub-groups of ", group_elems,
                 " elements: must be >= 1");
  const int64_t burst = std::max<int64_t>(burst_elems, 0);
  const int64_t spanned = burst == 0 ? 0 : (burst + group_elems - 1) / group_elems + 1;
  return std::max({int64_t{8}, 4 * slots, spanned + slots});
}

}  // namespace zoff::placement
