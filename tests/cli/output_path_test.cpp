// `zoff train --save-model`, `zoff export --out` and `zoff report --out` replace only regular
// files: a FIFO, a character device, a directory or a symbolic link at the path is refused (exit 2,
// one line) and left as it was, and a bad --save-model is found before training starts.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli_test_support.h"

namespace zoff::cli_test::output_path_test {
namespace {

namespace fs = std::filesystem;
constexpr double kRefuseTimeoutSeconds = 60;

const char* const kConfig =
    R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})";

// Things that are not regular files, made in `dir`: (path, what the error calls it).
std::vector<std::pair<std::string, std::string>> not_ours(const TempDir& dir) {
  const std::string fifo = dir.file("fifo");
  EXPECT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directories(dir.file("a_dir"));
  write_text(dir.file("precious"), "precious");
  fs::create_symlink(dir.file("precious"), dir.file("link"));
  std::vector<std::pair<std::string, std::string>> paths = {
      {fifo, "FIFO"}, {dir.file("a_dir"), "directory"}, {dir.file("link"), "symbolic link"}};
  // The probe's case was /dev/full replaced by a file (as root). Our own node for the same
  // device (1, 3 is /dev/null's), so a regression cannot damage the machine's; creating one
  // needs CAP_MKNOD, which CI (root) has: elsewhere the device case is left out.
  if (mknod(dir.file("device").c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0) {
    paths.emplace_back(dir.file("device"), "character device");
  }
  return paths;
}

// Each of not_ours() is still what it was (and the symlink's target is untouched).
void expect_untouched(const TempDir& dir) {
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(dir.file("fifo"))));
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(dir.file("a_dir"))));
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir.file("link"))));
  EXPECT_EQ(read_text(dir.file("precious")), "precious");
  if (fs::exists(fs::symlink_status(dir.file("device")))) {
    EXPECT_TRUE(fs::is_character_file(fs::symlink_status(dir.file("device"))));
  }
}

TEST(OutputPath, SaveModelRefusesWhatIsNotARegularFileBeforeTraining) {
  TempDir dir;
  write_text(dir.file("c.json"), kConfig);
  for (const auto& [path, kind] : not_ours(dir)) {
    const auto r = run_zoff({"train", "--model", "mlp", "--config", dir.file("c.json"), "--steps",
                             "1", "--threads", "1", "--save-model", path},
                            {}, kRefuseTimeoutSeconds);
    expect_one_line_refusal(r, {"--save-model", path, kind});
    EXPECT_EQ(r.out.find("done:"), std::string::npos) << "trained first: " << describe(r);
  }
  expect_untouched(dir);
}

TEST(OutputPath, SaveModelInAMissingDirectoryIsRefusedBeforeTraining) {
  TempDir dir;
  write_text(dir.file("c.json"), kConfig);
  const std::string path = dir.file("no/such/dir/model.pt");
  const auto r = run_zoff({"train", "--model", "mlp", "--config", dir.file("c.json"), "--steps",
                           "1", "--threads", "1", "--save-model", path},
                          {}, kRefuseTimeoutSeconds);
  expect_one_line_refusal(r, {"--save-model", path, "does not exist"});
  EXPECT_EQ(r.out.find("done:"), std::string::npos) << "trained first: " << describe(r);
}

TEST(OutputPath, ExportRefusesWhatIsNotARegularFile) {
  TempDir dir;
  for (const auto& [path, kind] : not_ours(dir)) {
    // Checked before the checkpoint is read: this one does not even exist.
    const auto r =
        run_zoff({"export", dir.file("no_checkpoint"), "--out", path}, {}, kRefuseTimeoutSeconds);
    expect_one_line_refusal(r, {"--out", path, kind});
  }
  expect_untouched(dir);
}

TEST(OutputPath, ReportRefusesWhatIsNotARegularFile) {
  TempDir dir;
  write_text(dir.file("run.jsonl"), "{\"step\": 1, \"loss\": 2.0}\n");
  for (const auto& [path, kind] : not_ours(dir)) {
    const auto r =
        run_zoff({"report", dir.file("run.jsonl"), "--out", path}, {}, kRefuseTimeoutSeconds);
    expect_one_line_refusal(r, {"--out", path, kind});
  }
  expect_untouched(dir);
}

// A log whose last line a kill cut off is reported (with a warning), not refused.
TEST(ReportLog, LastLineCutByAKillIsReadWithAWarning) {
  TempDir dir;
  write_text(dir.file("run.jsonl"),
             "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": 1.5}\n{\"step\": 3, \"lo");
  const auto r = run_zoff({"report", dir.file("run.jsonl"), "--out", dir.file("r.html")}, {},
                          kRefuseTimeoutSeconds);
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find("zoff: warning: " + dir.file("run.jsonl") + ": the last line is cut"),
            std::string::npos)
      << describe(r);
  EXPECT_TRUE(fs::is_regular_file(dir.file("r.html")));
}

}  // namespace
}  // namespace zoff::cli_test::output_path_test
