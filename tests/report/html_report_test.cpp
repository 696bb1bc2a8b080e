// Tests the HTML report: charts present, summary values, atomic write, and bad input.
#include "zoff/report/html_report.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "report_test_log.h"
#include "zoff/core/error.h"

namespace zoff::report::html_report_test {
namespace {

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1)) {
    ++n;
  }
  return n;
}

class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/zoff_report_test_XXXXXX";
    path_ = mkdtemp(t);
  }
  ~TempDir() {
    if (DIR* d = opendir(path_.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") unlink((path_ + "/" + n).c_str());
      }
      closedir(d);
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    if (DIR* d = opendir(path_.c_str())) {
      while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") out.push_back(n);
      }
      closedir(d);
    }
    return out;
  }

 private:
  std::string path_;
};

TEST(HtmlReport, RendersEveryChartFromALog) {
  const RunLog run = parse_training_log(testing::make_training_log(200), "runs/offload.jsonl");
  const std::string html = render_html_report({run});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* id :
       {"chart-loss", "chart-lr", "chart-throughput", "chart-tokens", "chart-grad-norm",
        "chart-memory", "chart-memory-steps", "chart-eval-accuracy"}) {
    EXPECT_NE(html.find(std::string("<svg id=\"") + id + "\""), std::string::npos) << id;
  }
  EXPECT_EQ(count(html, "<svg "), 8u);
  EXPECT_EQ(count(html, "</svg>"), 8u);
  // Self-contained: no scripts and nothing fetched from elsewhere.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("href=\"http"), std::string::npos);
  // Eval val_loss is drawn as dashed markers on the loss chart.
  EXPECT_NE(html.find("offload (eval)"), std::string::npos);
  // Memory bars: one per tier, each category a rect with a tooltip.
  EXPECT_NE(html.find("data-label=\"offload / compute\""), std::string::npos);
  EXPECT_NE(html.find("data-label=\"offload / offload\""), std::string::npos);
  EXPECT_NE(html.find("offload / offload optim: 1.5 GB"), std::string::npos);
  // Summary: 200 steps, peak memory = 0.25 + 0.106 + 0.5 + 1.5 GB.
  EXPECT_NE(html.find("<table id=\"summary\">"), std::string::npos);
  EXPECT_NE(html.find("<td>200</td>"), std::string::npos);
  EXPECT_NE(html.find("2.36 GB"), std::string::npos);
  // The final loss appears with 4 significant digits.
  char final_loss[32];
  std::snprintf(final_loss, sizeof(final_loss), "<td>%.4g</td>", run.steps.back().loss);
  EXPECT_NE(html.find(final_loss), std::string::npos) << final_loss;
}

TEST(HtmlReport, TwoRunsShareChartsWithDistinctNames) {
  const RunLog a = parse_training_log(testing::make_training_log(80), "a/run.jsonl");
  const RunLog b = parse_training_log(testing::make_training_log(60, 1.2), "b/run.jsonl");
  const std::string html = render_html_report({a, b});
  EXPECT_NE(html.find("data-name=\"run\""), std::string::npos);
  EXPECT_NE(html.find("data-name=\"run (2)\""), std::string::npos);
  EXPECT_EQ(count(html, "<svg id=\"chart-loss\""), 1u);
}

TEST(HtmlReport, WritesAtomicallyFromFiles) {
  TempDir dir;
  const std::string log1 = dir.path() + "/baseline.jsonl", log2 = dir.path() + "/zero2.jsonl";
  std::ofstream(log1) << testing::make_training_log(100);
  std::ofstream(log2) << testing::make_training_log(100, 0.9);
  const std::string out = dir.path() + "/report.html";
  std::ofstream(out) << "old contents";
  write_html_report({log1, log2}, out);
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("<svg id=\"chart-memory\""), std::string::npos);
  EXPECT_NE(text.str().find("zero2"), std::string::npos);
  EXPECT_EQ(dir.entries().size(), 3u) << "a temporary file was left behind";
}

TEST(HtmlReport, BadInputIsCleanError) {
  TempDir dir;
  const std::string log = dir.path() + "/run.jsonl";
  std::ofstream(log) << "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": 1.9\n";
  try {
    write_html_report({log}, dir.path() + "/out.html");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("run.jsonl:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_html_report({dir.path() + "/missing.jsonl"}, dir.path() + "/o.html"),
               UsageError);
  std::ofstream(log, std::ios::trunc) << "";
  EXPECT_THROW(write_html_report({log}, dir.path() + "/o.html"), UsageError);
  EXPECT_THROW(write_html_report({}, dir.path() + "/o.html"), UsageError);
  // A directory that does not exist cannot take the output: a UsageError naming it.
  std::ofstream(log, std::ios::trunc) << "{\"step\": 1, \"loss\": 2.0}\n";
  try {
    write_html_report({log}, dir.path() + "/no/such/dir/out.html");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/dir"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dir.entries().size(), 1u);  // nothing but the log
}

}  // namespace
}  // namespace zoff::report::html_report_test
