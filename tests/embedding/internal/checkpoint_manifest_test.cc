#include "embedding/internal/checkpoint_manifest.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace embedding_internal {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

TEST(CheckpointManifestTest, ParsesWhatFormatWrote) {
  CheckpointInfo info;
  info.checkpoint_id = "c2";
  info.global_step = 42;
  info.num_rows = 1000;
  info.parent_id = "c1";
  info.delta_rows = 17;
  absl::StatusOr<CheckpointInfo> parsed =
      ParseCheckpointManifest("c2", FormatCheckpointManifest(info));
  ASSERT_THAT(parsed.status(), IsOk());
  EXPECT_EQ(parsed->checkpoint_id, "c2");
  EXPECT_EQ(parsed->global_step, 42u);
  EXPECT_EQ(parsed->num_rows, 1000u);
  EXPECT_EQ(parsed->parent_id, "c1");
  EXPECT_EQ(parsed->delta_rows, 17u);
}

TEST(CheckpointManifestTest, AnythingElseIsDataLossNamingWhy) {
  const struct {
    const char* text;
    const char* why;
  } cases[] = {
      {"garbage", "not key=value"},
      {"", "no global_step"},
      {"global_step=1\n", "no num_rows"},
      {"global_step=1\nnum_rows=x\n", "bad value 'x' of num_rows"},
      {"global_step=-1\nnum_rows=1\n", "of global_step"},
      {"global_step=1\nnum_rows=1\ncolor=red\n", "unknown key 'color'"},
      {"global_step=1\nglobal_step=2\nnum_rows=1\n", "appears twice"},
      {"global_step=1\nnum_rows=1\nparent=../x\ndelta_rows=1\n", "parent"},
      {"global_step=1\nnum_rows=1\nparent=me\ndelta_rows=1\n", "parent"},
      {"global_step=1\nnum_rows=1\nparent=c1\n", "come together"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(ParseCheckpointManifest("me", c.text),
                StatusIs(absl::StatusCode::kDataLoss,
                         ::testing::AllOf(HasSubstr("checkpoint 'me'"),
                                          HasSubstr(c.why))))
        << c.text;
  }
}

}  // namespace
}  // namespace embedding_internal
}  // namespace strata
