#include "worker/data/shuffle_window.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/worker/data/test_files.h"
#include "worker/data/criteo_format.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::testing::ElementsAreArray;

constexpr int kLines = 1000;

class ShuffleWindowTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Line i: C1 = i (in hex), which names the line in what comes back.
    std::string text;
    for (int i = 0; i < kLines; ++i) {
      absl::StrAppendFormat(&text, "%d\t1%s\t%08x\n", i % 2,
                            std::string(12, '\t'), i);
      line_of_key_[CriteoFeatureKey(0, static_cast<uint32_t>(i))] = i;
    }
    path_ = temp_dir_.path() + "/lines";
    testing::WriteTextFile(path_, text);
  }

  // The lines of `epochs` epochs in the order a window of `window` hands
  // them out in batches of `batch`.
  std::vector<std::vector<int>> Read(size_t window, int batch, uint64_t seed,
                                     int epochs, int first_epoch = 0) {
    CriteoReaderOptions options;
    options.files = {path_};
    options.batch_size = 7;  // the reader's batches do not matter
    auto reader = CriteoReader::Open(options);
    EXPECT_THAT(reader.status(), IsOk());
    ShuffleWindow shuffle(reader->get(), window, batch, seed, first_epoch);
    std::vector<std::vector<int>> lines(epochs);
    Batch examples;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      if (epoch > 0) {
        EXPECT_THAT(shuffle.StartNextEpoch(), IsOk());
      }
      while (true) {
        EXPECT_THAT(shuffle.ReadBatch(&examples), IsOk());
        if (examples.size() == 0) break;
        EXPECT_LE(examples.size(), static_cast<size_t>(batch));
        for (size_t i = 0; i < examples.size(); ++i) {
          // C1's key of example i, and its label, which follows the line.
          const int line =
              line_of_key_.at(examples.keys[examples.field_offsets[i * 26]]);
          EXPECT_EQ(examples.labels[i], static_cast<float>(line % 2));
          lines[epoch].push_back(line);
        }
      }
    }
    return lines;
  }

  testing::TempDir temp_dir_{"shuffle_window"};
  std::string path_;
  absl::flat_hash_map<uint64_t, int> line_of_key_;
};

TEST_F(ShuffleWindowTest, EveryLineOncePerEpochMixedOnlyWithinItsWindow) {
  const std::vector<int> lines = Read(300, 32, 1, 1)[0];
  ASSERT_EQ(lines.size(), static_cast<size_t>(kLines));
  std::vector<int> sorted = lines;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < kLines; ++i) ASSERT_EQ(sorted[i], i);
  // Windows of 300, 300, 300 and the last 100 lines, each permuted.
  for (int start : {0, 300, 600, 900}) {
    const int end = std::min(start + 300, kLines);
    std::vector<int> window(lines.begin() + start, lines.begin() + end);
    EXPECT_NE(window.front() + 1, window[1]) << "window at " << start;
    std::sort(window.begin(), window.end());
    EXPECT_EQ(window.front(), start);
    EXPECT_EQ(window.back(), end - 1);
  }
}

TEST_F(ShuffleWindowTest, TheOrderFollowsTheSeedAndTheEpochOnly) {
  const auto first = Read(250, 64, 5, 2);
  const auto again = Read(250, 64, 5, 2);
  EXPECT_EQ(first, again);
  EXPECT_NE(first[0], first[1]);  // each epoch its own order
  EXPECT_NE(first[0], Read(250, 64, 6, 1)[0]);
  // A resumed run that starts at epoch 1 sees epoch 1's order.
  EXPECT_THAT(Read(250, 64, 5, 1, /*first_epoch=*/1)[0],
              ElementsAreArray(first[1]));
}

TEST_F(ShuffleWindowTest, AWindowLargerThanTheFileShufflesItWhole) {
  const std::vector<int> lines = Read(1'000'000, 100, 1, 1)[0];
  ASSERT_EQ(lines.size(), static_cast<size_t>(kLines));
  // Some of the last lines come out in the first batch.
  EXPECT_GT(*std::max_element(lines.begin(), lines.begin() + 100), 900);
}

}  // namespace
}  // namespace strata
