// AioOptions: backend names and validation of DeepSpeed's aio values.
#include "zoff/offload/aio_options.h"

#include <gtest/gtest.h>

#include "zoff/core/error.h"

namespace zoff::offload::aio_options_test {
namespace {

TEST(AioOptions, BackendNamesRoundTrip) {
  for (auto b : {IoBackend::kAuto, IoBackend::kUring, IoBackend::kThreads}) {
    EXPECT_EQ(parse_io_backend(to_string(b)), b);
  }
  try {
    parse_io_backend("libaio");
    FAIL() << "libaio accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'libaio'"), std::string::npos) << e.what();
  }
}

TEST(AioOptions, DefaultsAreValid) { EXPECT_NO_THROW(validate_aio_options(AioOptions{})); }

TEST(AioOptions, BadValuesNameThemselves) {
  AioOptions a;
  a.block_size = 1000;
  EXPECT_THROW(validate_aio_options(a), UsageError);
  a = AioOptions{};
  a.queue_depth = 0;
  EXPECT_THROW(validate_aio_options(a), UsageError);
  a = AioOptions{};
  a.thread_count = 0;
  EXPECT_THROW(validate_aio_options(a), UsageError);
  a = AioOptions{};
  a.timeout = std::chrono::milliseconds(0);
  try {
    validate_aio_options(a);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("timeout = 0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zoff::offload::aio_options_test
