// Renders a report in headless Chromium: the charts must be in the DOM and a screenshot taken.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "report_test_log.h"
#include "zoff/report/html_report.h"
#include "zoff_test_paths.h"

namespace zoff::report::chromium_render_test {
namespace {

constexpr const char* kChromium = "/usr/bin/chromium";
constexpr int kChromiumTimeoutSeconds = 90;  // first start of a fresh profile is slow on 2 cores

std::string run_capture(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return out;
  }
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *status = pclose(p);
  return out;
}

std::string chromium_command(const std::string& profile, const std::string& extra,
                             const std::string& url) {
  return "timeout " + std::to_string(kChromiumTimeoutSeconds) + " " + kChromium +
         " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
         " --disable-background-networking --disable-component-update --disable-sync"
         " --user-data-dir=" +
         profile + " --window-size=1200,1600 " + extra + " " + url + " 2>/dev/null";
}

TEST(ChromiumRender, ChartsAreInTheRenderedDomAndScreenshot) {
  if (access(kChromium, X_OK) != 0) {
    GTEST_SKIP() << kChromium << " is not installed (scripts/setup.sh installs chromium)";
  }
  char tmpl[] = "/tmp/zoff_chromium_test_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string log1 = dir + "/zero2-offload.jsonl", log2 = dir + "/baseline.jsonl";
  std::ofstream(log1) << testing::make_training_log(300);
  std::ofstream(log2) << testing::make_training_log(300, 1.15);
  const std::string html = dir + "/report.html";
  write_html_report({log1, log2}, html);

  int status = 0;
  const std::string dom =
      run_capture(chromium_command(dir + "/profile-dom", "--dump-dom", "file://" + html), &status);
  ASSERT_EQ(status, 0) << "chromium --dump-dom failed";
  for (const char* id :
       {"chart-loss", "chart-lr", "chart-throughput", "chart-memory", "chart-eval-accuracy"}) {
    EXPECT_NE(dom.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  }
  EXPECT_NE(dom.find("<polyline"), std::string::npos);
  EXPECT_NE(dom.find("id=\"summary\""), std::string::npos);

  // The screenshot is kept in the build directory for a human to look at.
  const std::string png = std::string(ZOFF_BINARY_DIR) + "/report_screenshot.png";
  std::remove(png.c_str());
  run_capture(chromium_command(dir + "/profile-shot", "--screenshot=" + png, "file://" + html),
              &status);
  ASSERT_EQ(status, 0) << "chromium --screenshot failed";
  struct stat st {};
  ASSERT_EQ(stat(png.c_str(), &st), 0) << "no screenshot at " << png;
  EXPECT_GT(st.st_size, 20000) << "screenshot suspiciously small (blank page?)";
  std::ifstream in(png, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  std::printf("screenshot: %s (%lld bytes)\n", png.c_str(), static_cast<long long>(st.st_size));
  std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace zoff::report::chromium_render_test
