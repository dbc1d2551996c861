// SharedAnswerSlots: the claim word of each slot, as a shard would see and
// change it through its own mapping of the memory.

#include "client/internal/shared_answer_slots.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <set>

#include "common/pull_wire.h"
#include "common/shared_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/strata.pb.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::client_internal::SharedAnswerSlots;
using ::strata::testing::IsOk;
using ::strata::testing::StatusIs;

// The shard's side of one offer: the request's region in its own mapping.
struct ShardView {
  std::unique_ptr<SharedMemory> memory;
  v1::SharedAnswer request;
  uint8_t* region() const { return memory->data() + request.offset(); }
  uint64_t word() const { return LoadSharedAnswerClaim(region()); }
};

ShardView View(const SharedAnswerSlots::Offer& offer) {
  v1::PullRequest field;
  EXPECT_TRUE(field.ParseFromString(offer.request_field));
  ShardView view;
  view.request = field.shared_answer();
  absl::StatusOr<std::unique_ptr<SharedMemory>> opened = SharedMemory::Open(
      view.request.path(), view.request.size(), view.request.size());
  EXPECT_THAT(opened, IsOk());
  if (opened.ok()) view.memory = *std::move(opened);
  return view;
}

std::shared_ptr<SharedAnswerSlots> Slots(size_t slots) {
  absl::StatusOr<std::shared_ptr<SharedAnswerSlots>> created =
      SharedAnswerSlots::Create(slots, 4096);
  EXPECT_THAT(created, IsOk());
  return created.ok() ? *created : nullptr;
}

TEST(SharedAnswerSlotsTest, EachOfferIsANewGenerationOfTheSlotsClaim) {
  std::shared_ptr<SharedAnswerSlots> slots = Slots(1);
  ASSERT_NE(slots, nullptr);
  std::set<uint64_t> claims;
  for (int round = 0; round < 3; ++round) {
    std::optional<SharedAnswerSlots::Offer> offer = slots->TryOffer();
    ASSERT_TRUE(offer.has_value());
    EXPECT_FALSE(slots->TryOffer().has_value()) << "the only slot is taken";
    ShardView shard = View(*offer);
    ASSERT_NE(shard.memory, nullptr);
    const uint64_t claim = shard.request.claim();
    EXPECT_EQ(SharedAnswerClaimState(claim), SharedAnswerClaim::kOffered);
    EXPECT_EQ(shard.word(), claim) << "the memory holds the request's claim";
    EXPECT_EQ(shard.request.capacity(), 4096u);
    EXPECT_EQ(slots->answer_capacity(), 4096u - kSharedAnswerClaimBytes);
    claims.insert(claim);
    slots->Release(offer->slot);
  }
  EXPECT_EQ(claims.size(), 3u);
}

TEST(SharedAnswerSlotsTest, APullGivenUpBeforeTheShardWroteFreesItsSlot) {
  std::shared_ptr<SharedAnswerSlots> slots = Slots(1);
  ASSERT_NE(slots, nullptr);
  std::optional<SharedAnswerSlots::Offer> offer = slots->TryOffer();
  ASSERT_TRUE(offer.has_value());
  ShardView shard = View(*offer);
  ASSERT_NE(shard.memory, nullptr);
  const uint64_t claim = shard.request.claim();
  slots->Abandon(offer->slot);
  EXPECT_EQ(shard.word(),
            SharedAnswerClaimAs(claim, SharedAnswerClaim::kAbandoned));
  // A late shard cannot claim the region any more.
  uint64_t expected = claim;
  EXPECT_FALSE(ExchangeSharedAnswerClaim(
      shard.region(), &expected,
      SharedAnswerClaimAs(claim, SharedAnswerClaim::kWriting)));
  EXPECT_TRUE(slots->TryOffer().has_value());
}

TEST(SharedAnswerSlotsTest, ASlotGivenUpWhileTheShardWritesWaitsForIt) {
  std::shared_ptr<SharedAnswerSlots> slots = Slots(2);
  ASSERT_NE(slots, nullptr);
  std::optional<SharedAnswerSlots::Offer> offer = slots->TryOffer();
  ASSERT_TRUE(offer.has_value());
  ShardView shard = View(*offer);
  ASSERT_NE(shard.memory, nullptr);
  const uint64_t claim = shard.request.claim();
  uint64_t expected = claim;
  ASSERT_TRUE(ExchangeSharedAnswerClaim(
      shard.region(), &expected,
      SharedAnswerClaimAs(claim, SharedAnswerClaim::kWriting)));
  slots->Abandon(offer->slot);
  EXPECT_EQ(slots->waiting(), 1u);
  EXPECT_EQ(shard.word(),
            SharedAnswerClaimAs(claim, SharedAnswerClaim::kWriting));
  // The other slot, then none while the shard still writes.
  std::optional<SharedAnswerSlots::Offer> other = slots->TryOffer();
  ASSERT_TRUE(other.has_value());
  EXPECT_NE(other->slot, offer->slot);
  EXPECT_FALSE(slots->TryOffer().has_value());
  StoreSharedAnswerClaim(
      shard.region(), SharedAnswerClaimAs(claim, SharedAnswerClaim::kWritten));
  std::optional<SharedAnswerSlots::Offer> again = slots->TryOffer();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->slot, offer->slot);
  EXPECT_EQ(slots->waiting(), 0u);
  EXPECT_NE(View(*again).request.claim(), claim);
}

// A shard killed in the middle of a write never marks the slot written:
// the slot comes back once that process is gone, not while it lives.
TEST(SharedAnswerSlotsTest, ASlotWhoseWriterDiedComesBack) {
  std::shared_ptr<SharedAnswerSlots> slots = Slots(1);
  ASSERT_NE(slots, nullptr);
  std::optional<SharedAnswerSlots::Offer> offer = slots->TryOffer();
  ASSERT_TRUE(offer.has_value());
  ShardView shard = View(*offer);
  ASSERT_NE(shard.memory, nullptr);
  EXPECT_EQ(LoadSharedAnswerWriter(shard.region()), 0u);
  const uint64_t claim = shard.request.claim();
  uint64_t expected = claim;
  ASSERT_TRUE(ExchangeSharedAnswerClaim(
      shard.region(), &expected,
      SharedAnswerClaimAs(claim, SharedAnswerClaim::kWriting)));
  slots->Abandon(offer->slot);
  // Writer not known yet, then a live one (this process): the slot waits.
  EXPECT_FALSE(slots->TryOffer().has_value());
  StoreSharedAnswerWriter(shard.region(), static_cast<uint64_t>(::getpid()));
  EXPECT_FALSE(slots->TryOffer().has_value());
  // A process that has exited and been reaped.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  StoreSharedAnswerWriter(shard.region(), static_cast<uint64_t>(child));
  std::optional<SharedAnswerSlots::Offer> again = slots->TryOffer();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->slot, offer->slot);
  EXPECT_EQ(LoadSharedAnswerWriter(shard.region()), 0u)
      << "a new offer clears the writer";
}

TEST(SharedAnswerSlotsTest, APullThatFailedAfterTheShardWroteFreesItsSlot) {
  std::shared_ptr<SharedAnswerSlots> slots = Slots(1);
  ASSERT_NE(slots, nullptr);
  std::optional<SharedAnswerSlots::Offer> offer = slots->TryOffer();
  ASSERT_TRUE(offer.has_value());
  ShardView shard = View(*offer);
  ASSERT_NE(shard.memory, nullptr);
  StoreSharedAnswerClaim(
      shard.region(),
      SharedAnswerClaimAs(shard.request.claim(), SharedAnswerClaim::kWritten));
  slots->Abandon(offer->slot);
  EXPECT_EQ(slots->waiting(), 0u);
  EXPECT_TRUE(slots->TryOffer().has_value());
}

TEST(SharedAnswerSlotsTest, CreateRefusesSlotsWithNoRoomPastTheClaim) {
  EXPECT_THAT(SharedAnswerSlots::Create(0, 4096),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SharedAnswerSlots::Create(2, kSharedAnswerClaimBytes),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(SharedAnswerSlots::Create(2, 1),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace strata
