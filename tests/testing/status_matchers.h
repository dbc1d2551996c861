#ifndef STRATA_TESTS_TESTING_STATUS_MATCHERS_H_
#define STRATA_TESTS_TESTING_STATUS_MATCHERS_H_

// gMock matchers for absl::Status and absl::StatusOr<T>, which GoogleTest
// 1.12 and our Abseil (20220623) lack.
//
//   EXPECT_THAT(store->Flush(), IsOk());
//   EXPECT_THAT(store->GetTableConfig("x"), StatusIs(kNotFound));
//   EXPECT_THAT(status, StatusIs(kInvalidArgument, HasSubstr("dim")));
//   EXPECT_THAT(store->CreateTable(config), IsOkAndHolds(true));
//   STRATA_ASSERT_OK_AND_ASSIGN(auto store, EmbeddingStore::Open(options));

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata {
namespace testing {
namespace status_matchers_internal {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Matches an OK absl::Status or absl::StatusOr<T>.
class IsOkMatcherImpl {
 public:
  template <typename StatusType>
  bool MatchAndExplain(const StatusType& actual,
                       ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(actual);
    if (!status.ok() && !std::is_same<StatusType, absl::Status>::value) {
      *listener << "whose status is " << status;
    }
    return status.ok();
  }
  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

// Matches a status (or the status of a StatusOr) by code and message.
class StatusIsMatcherImpl {
 public:
  StatusIsMatcherImpl(::testing::Matcher<absl::StatusCode> code,
                      ::testing::Matcher<const std::string&> message)
      : code_(std::move(code)), message_(std::move(message)) {}

  template <typename StatusType>
  bool MatchAndExplain(const StatusType& actual,
                       ::testing::MatchResultListener* listener) const {
    const absl::Status& status = GetStatus(actual);
    if (!code_.Matches(status.code())) {
      ExplainStatus<StatusType>(status, listener);
      return false;
    }
    const std::string message(status.message());
    ::testing::StringMatchResultListener message_listener;
    if (!message_.MatchAndExplain(message, &message_listener)) {
      *listener << "whose message \"" << message << "\" does not match";
      const std::string explanation = message_listener.str();
      if (!explanation.empty()) *listener << ", " << explanation;
      return false;
    }
    return true;
  }

  void DescribeTo(std::ostream* os) const {
    *os << "has a status code that ";
    code_.DescribeTo(os);
    *os << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "has a status code that ";
    code_.DescribeNegationTo(os);
    *os << " or a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  // GoogleTest prints an absl::Status itself, but a StatusOr only as bytes.
  template <typename StatusType>
  static void ExplainStatus(const absl::Status& status,
                            ::testing::MatchResultListener* listener) {
    if (!std::is_same<StatusType, absl::Status>::value) {
      *listener << "whose status is " << status;
    }
  }

  ::testing::Matcher<absl::StatusCode> code_;
  ::testing::Matcher<const std::string&> message_;
};

// Matches an absl::StatusOr<T> that holds a value matching the inner matcher.
template <typename StatusOrType>
class IsOkAndHoldsMatcherImpl
    : public ::testing::MatcherInterface<const StatusOrType&> {
 public:
  using ValueType = typename std::decay_t<StatusOrType>::value_type;

  template <typename InnerMatcher>
  explicit IsOkAndHoldsMatcherImpl(InnerMatcher&& inner)
      : inner_(::testing::SafeMatcherCast<const ValueType&>(
            std::forward<InnerMatcher>(inner))) {}

  bool MatchAndExplain(
      const StatusOrType& actual,
      ::testing::MatchResultListener* listener) const override {
    if (!actual.ok()) {
      *listener << "whose status is " << actual.status();
      return false;
    }
    ::testing::StringMatchResultListener inner_listener;
    const bool matches = inner_.MatchAndExplain(*actual, &inner_listener);
    *listener << "whose value is " << ::testing::PrintToString(*actual);
    const std::string explanation = inner_listener.str();
    if (!explanation.empty()) *listener << ", " << explanation;
    return matches;
  }
  void DescribeTo(std::ostream* os) const override {
    *os << "is OK and has a value that ";
    inner_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "is not OK or has a value that ";
    inner_.DescribeNegationTo(os);
  }

 private:
  ::testing::Matcher<const ValueType&> inner_;
};

template <typename InnerMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(InnerMatcher inner) : inner_(std::move(inner)) {}

  template <typename StatusOrType>
  operator ::testing::Matcher<StatusOrType>() const {  // NOLINT
    return ::testing::Matcher<StatusOrType>(
        new IsOkAndHoldsMatcherImpl<const StatusOrType&>(inner_));
  }

 private:
  InnerMatcher inner_;
};

}  // namespace status_matchers_internal

// Matches an OK absl::Status or an absl::StatusOr<T> that holds a value.
inline ::testing::PolymorphicMatcher<status_matchers_internal::IsOkMatcherImpl>
IsOk() {
  return ::testing::MakePolymorphicMatcher(
      status_matchers_internal::IsOkMatcherImpl());
}

// Matches a status whose code matches `code_matcher` (an absl::StatusCode,
// or a matcher of one such as Not(absl::StatusCode::kOk)) and whose message
// matches `message_matcher` (a matcher of std::string, such as
// HasSubstr("dim"), or a string for equality).
template <typename CodeMatcher, typename MessageMatcher>
::testing::PolymorphicMatcher<status_matchers_internal::StatusIsMatcherImpl>
StatusIs(CodeMatcher&& code_matcher, MessageMatcher&& message_matcher) {
  return ::testing::MakePolymorphicMatcher(
      status_matchers_internal::StatusIsMatcherImpl(
          ::testing::MatcherCast<absl::StatusCode>(
              std::forward<CodeMatcher>(code_matcher)),
          ::testing::MatcherCast<const std::string&>(
              std::forward<MessageMatcher>(message_matcher))));
}

// Matches a status whose code matches `code_matcher`, whatever its message.
template <typename CodeMatcher>
::testing::PolymorphicMatcher<status_matchers_internal::StatusIsMatcherImpl>
StatusIs(CodeMatcher&& code_matcher) {
  return StatusIs(std::forward<CodeMatcher>(code_matcher), ::testing::_);
}

// Matches an absl::StatusOr<T> that is OK and whose value matches
// `inner_matcher` (a matcher of T, or a T for equality).
template <typename InnerMatcher>
status_matchers_internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>>
IsOkAndHolds(InnerMatcher&& inner_matcher) {
  return status_matchers_internal::IsOkAndHoldsMatcher<
      std::decay_t<InnerMatcher>>(std::forward<InnerMatcher>(inner_matcher));
}

}  // namespace testing
}  // namespace strata

#define STRATA_STATUS_MATCHERS_CONCAT_INNER_(x, y) x##y
#define STRATA_STATUS_MATCHERS_CONCAT_(x, y) \
  STRATA_STATUS_MATCHERS_CONCAT_INNER_(x, y)

// STRATA_ASSERT_OK_AND_ASSIGN(lhs, rexpr): evaluates `rexpr` (an
// absl::StatusOr), fails the test and returns when it is not OK, else moves
// the value into `lhs` (which may be a declaration: `auto store`). Usable
// only in functions returning void, like ASSERT_*.
#define STRATA_ASSERT_OK_AND_ASSIGN(lhs, rexpr)                           \
  STRATA_ASSERT_OK_AND_ASSIGN_IMPL_(                                      \
      STRATA_STATUS_MATCHERS_CONCAT_(strata_statusor_, __COUNTER__), lhs, \
      rexpr)

#define STRATA_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr)             \
  auto statusor = (rexpr);                                                  \
  ASSERT_TRUE(statusor.ok()) << #rexpr << " failed: " << statusor.status(); \
  lhs = std::move(statusor).value()

#endif  // STRATA_TESTS_TESTING_STATUS_MATCHERS_H_
