#include "server/internal/shared_answers.h"

#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/shared_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace server_internal {
namespace {

using ::strata::testing::FakeClock;
using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kToken[] = "0123456789abcdef";

// A client's memory of `size` bytes that starts with kToken.
std::unique_ptr<SharedMemory> ClientMemory(size_t size = 8192) {
  absl::StatusOr<std::unique_ptr<SharedMemory>> memory =
      SharedMemory::Create(size);
  EXPECT_THAT(memory, IsOk());
  if (!memory.ok()) return nullptr;
  std::memcpy((*memory)->data(), kToken, kSharedAnswerTokenBytes);
  return *std::move(memory);
}

v1::SharedAnswer Request(const SharedMemory& memory, uint64_t offset = 4096,
                         uint64_t capacity = 4096) {
  v1::SharedAnswer request;
  request.set_path(memory.path());
  request.set_size(memory.size());
  request.set_token(std::string(kToken, kSharedAnswerTokenBytes));
  request.set_offset(offset);
  request.set_capacity(capacity);
  return request;
}

TEST(SharedAnswersTest, FindsTheRegionInTheClientsMemory) {
  std::unique_ptr<SharedMemory> client = ClientMemory();
  ASSERT_NE(client, nullptr);
  SharedAnswers answers{SharedAnswersOptions()};
  absl::StatusOr<SharedAnswers::Region> region = answers.Find(Request(*client));
  ASSERT_THAT(region, IsOk());
  EXPECT_EQ(region->capacity, 4096u);
  std::memcpy(region->data, "row", 3);
  EXPECT_EQ(std::memcmp(client->data() + 4096, "row", 3), 0);
  // Mapped once, however many pulls name it.
  ASSERT_THAT(answers.Find(Request(*client)), IsOk());
  EXPECT_EQ(answers.memories(), 1u);
}

TEST(SharedAnswersTest, RefusesAMemoryThatDoesNotStartWithTheToken) {
  std::unique_ptr<SharedMemory> client = ClientMemory();
  ASSERT_NE(client, nullptr);
  client->data()[0] ^= 1;
  SharedAnswers answers{SharedAnswersOptions()};
  EXPECT_THAT(answers.Find(Request(*client)),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("does not start with the request's token")));
  v1::SharedAnswer short_token = Request(*client);
  short_token.set_token("abc");
  EXPECT_THAT(answers.Find(short_token),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("token of 3 bytes")));
  EXPECT_EQ(answers.memories(), 0u);
}

TEST(SharedAnswersTest, RefusesRegionsOutsideTheMemoryOrUnaligned) {
  std::unique_ptr<SharedMemory> client = ClientMemory();
  ASSERT_NE(client, nullptr);
  SharedAnswers answers{SharedAnswersOptions()};
  for (const auto& [offset, capacity] :
       {std::make_pair(uint64_t{4096}, uint64_t{4097}),
        std::make_pair(uint64_t{8192}, uint64_t{1}),
        std::make_pair(~uint64_t{0} - 63, uint64_t{128}),
        std::make_pair(uint64_t{100}, uint64_t{64}),
        std::make_pair(uint64_t{4096}, uint64_t{kSharedAnswerClaimBytes}),
        std::make_pair(uint64_t{0}, uint64_t{0})}) {
    EXPECT_THAT(
        answers.Find(Request(*client, offset, capacity)),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not fit")))
        << offset << " " << capacity;
  }
}

TEST(SharedAnswersTest, UnmapsTheMemoryOfAClientThatClosedItAtTheLimit) {
  FakeClock clock;
  SharedAnswersOptions options;
  options.max_memories = 1;
  options.clock = &clock;
  SharedAnswers answers(options);
  std::unique_ptr<SharedMemory> first = ClientMemory();
  std::unique_ptr<SharedMemory> second = ClientMemory();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_THAT(answers.Find(Request(*first)), IsOk());
  EXPECT_THAT(answers.Find(Request(*second)),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("shared memory of 1 clients already")));
  first.reset();
  // The first client's memory is swept at once when the limit is reached.
  EXPECT_THAT(answers.Find(Request(*second)), IsOk());
  EXPECT_EQ(answers.memories(), 1u);
}

TEST(SharedAnswersTest, UnmapsTheMemoryOfAClientThatClosedItPeriodically) {
  FakeClock clock;
  SharedAnswersOptions options;
  options.clock = &clock;
  SharedAnswers answers(options);
  std::unique_ptr<SharedMemory> first = ClientMemory();
  std::unique_ptr<SharedMemory> second = ClientMemory();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_THAT(answers.Find(Request(*first)), IsOk());
  first.reset();
  ASSERT_THAT(answers.Find(Request(*second)), IsOk());
  EXPECT_EQ(answers.memories(), 2u);
  clock.Advance(options.sweep_every);
  ASSERT_THAT(answers.Find(Request(*second)), IsOk());
  EXPECT_EQ(answers.memories(), 1u);
}

}  // namespace
}  // namespace server_internal
}  // namespace strata
