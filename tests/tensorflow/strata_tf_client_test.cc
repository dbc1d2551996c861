// The C ABI of libstrata_tf_client.so against a real strata-server. The test
// links the shared library itself, so it sees only what the library exports.

#include "tensorflow/strata_tf_client.h"

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/server_process.h"
#include "tests/testing/status_matchers.h"

namespace strata {
namespace {

using ::strata::testing::IsOk;
using ::strata::testing::ServerProcess;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StrEq;

constexpr int kInvalidArgument = 3;
constexpr int kDeadlineExceeded = 4;
constexpr int kNotFound = 5;
constexpr int kAlreadyExists = 6;
constexpr int kUnavailable = 14;

class StrataTfClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_THAT(server_.Start(), IsOk());
    address_ = server_.address();
    client_ = MakeClient(address_.c_str(), /*retry_deadline_s=*/30);
    ASSERT_NE(client_, nullptr) << strata_tf_last_error_message();
  }
  void TearDown() override { strata_tf_client_destroy(client_); }

  static StrataTfClient* MakeClient(const char* shards,
                                    double retry_deadline_s) {
    StrataTfClientOptions options = {};
    options.shards = shards;
    options.rpc_timeout_s = 2;
    options.retry_deadline_s = retry_deadline_s;
    StrataTfClient* client = nullptr;
    return strata_tf_client_create(&options, &client) == 0 ? client : nullptr;
  }

  static StrataTfTableConfig SgdTable(const char* name, uint32_t dim) {
    StrataTfTableConfig config = {};
    config.name = name;
    config.dim = dim;
    config.optimizer = STRATA_TF_OPTIMIZER_SGD;
    config.learning_rate = 1.0f;
    return config;
  }

  ServerProcess server_;
  std::string address_;
  StrataTfClient* client_ = nullptr;
};

TEST(StrataTfClientAbiTest, ReportsItsVersion) {
  EXPECT_EQ(strata_tf_abi_version(), STRATA_TF_CLIENT_ABI_VERSION);
}

TEST(StrataTfClientAbiTest, CreateRejectsMissingAndEmptyShardAddresses) {
  StrataTfClientOptions options = {};
  StrataTfClient* client = nullptr;
  EXPECT_EQ(strata_tf_client_create(&options, &client), kInvalidArgument);
  EXPECT_EQ(strata_tf_last_error_code(), kInvalidArgument);
  EXPECT_THAT(strata_tf_last_error_message(), HasSubstr("no shard"));
  options.shards = "127.0.0.1:1,,127.0.0.1:2";
  EXPECT_EQ(strata_tf_client_create(&options, &client), kInvalidArgument);
  EXPECT_THAT(strata_tf_last_error_message(), HasSubstr("empty shard"));
  EXPECT_EQ(client, nullptr);
}

TEST(StrataTfClientAbiTest, CreateNamesAMissingTokenFile) {
  StrataTfClientOptions options = {};
  options.shards = "127.0.0.1:1";
  options.auth_token_file = "/nonexistent/strata-token";
  StrataTfClient* client = nullptr;
  EXPECT_NE(strata_tf_client_create(&options, &client), 0);
  EXPECT_THAT(strata_tf_last_error_message(),
              HasSubstr("/nonexistent/strata-token"));
}

TEST_F(StrataTfClientTest, EachKindOfClientRefusesTheOthersCalls) {
  StrataTfClientOptions options = {};
  options.shards = "127.0.0.1:1";
  StrataTfClient* serving = nullptr;
  ASSERT_EQ(strata_tf_serving_client_create(&options, &serving), 0)
      << strata_tf_last_error_message();
  const uint64_t key = 1;
  float row[2];
  EXPECT_EQ(strata_tf_pull(serving, "t", &key, 1, 2, row), kInvalidArgument);
  EXPECT_THAT(strata_tf_last_error_message(), HasSubstr("serving PS"));
  EXPECT_EQ(strata_tf_serving_lookup(client_, "t", &key, 1, 2, row),
            kInvalidArgument);
  EXPECT_THAT(strata_tf_last_error_message(), HasSubstr("training PS"));
  strata_tf_client_destroy(serving);
  options.shards = "";
  EXPECT_EQ(strata_tf_serving_client_create(&options, &serving),
            kInvalidArgument);
}

TEST_F(StrataTfClientTest, PushSumsDuplicatesAndPullReadsTheRowsBack) {
  StrataTfTableConfig config = SgdTable("abi_sgd", 2);
  ASSERT_EQ(strata_tf_create_table(client_, &config), 0)
      << strata_tf_last_error_message();
  EXPECT_EQ(strata_tf_create_table(client_, &config), 0);  // idempotent
  EXPECT_THAT(strata_tf_last_error_message(), StrEq(""));

  const uint64_t keys[] = {7, UINT64_MAX, 7};
  const float gradients[] = {1, 2, 10, 20, 3, 4};
  ASSERT_EQ(strata_tf_push(client_, "abi_sgd", keys, 3, 2, gradients), 0)
      << strata_tf_last_error_message();
  std::vector<float> rows(6, -1.0f);
  ASSERT_EQ(strata_tf_pull(client_, "abi_sgd", keys, 3, 2, rows.data()), 0);
  EXPECT_THAT(rows, ElementsAre(-4, -6, -10, -20, -4, -6));
  EXPECT_EQ(strata_tf_pull(client_, "abi_sgd", keys, 0, 2, nullptr), 0);
}

TEST_F(StrataTfClientTest, BackgroundPushesAllLandInOrderOnceWaitedFor) {
  StrataTfTableConfig config = SgdTable("abi_async", 2);
  ASSERT_EQ(strata_tf_create_table(client_, &config), 0);
  const uint64_t keys[] = {3, 4};
  constexpr int kPushes = 50;
  for (int i = 0; i < kPushes; ++i) {
    // Each push's buffer is gone when the call returns: it must be copied.
    std::vector<float> gradients = {1, 2, static_cast<float>(i), 0};
    ASSERT_EQ(strata_tf_push_async(client_, "abi_async", keys, 2, 2,
                                   gradients.data(), /*max_pending=*/3),
              0)
        << strata_tf_last_error_message();
    gradients.assign(4, 1e6f);
  }
  ASSERT_EQ(strata_tf_wait_for_pushes(client_), 0)
      << strata_tf_last_error_message();
  std::vector<float> rows(4);
  ASSERT_EQ(strata_tf_pull(client_, "abi_async", keys, 2, 2, rows.data()), 0);
  const float sum_of_i = kPushes * (kPushes - 1) / 2;
  EXPECT_THAT(rows, ElementsAre(-kPushes, -2 * kPushes, -sum_of_i, 0));
  EXPECT_EQ(strata_tf_push_async(client_, "abi_async", keys, 2, 2, rows.data(),
                                 /*max_pending=*/0),
            kInvalidArgument);
  EXPECT_THAT(strata_tf_last_error_message(), HasSubstr("max_pending is 0"));
}

TEST_F(StrataTfClientTest, AFailedBackgroundPushIsReportedOnceThenPushesGoOn) {
  const uint64_t key = 5;
  const float gradient[] = {1, 1};
  ASSERT_EQ(strata_tf_push_async(client_, "abi_unknown", &key, 1, 2, gradient,
                                 /*max_pending=*/1),
            0);
  EXPECT_EQ(strata_tf_wait_for_pushes(client_), kNotFound);
  EXPECT_THAT(strata_tf_last_error_message(), HasSubstr("abi_unknown"));
  EXPECT_EQ(strata_tf_wait_for_pushes(client_), 0);  // reported once

  StrataTfTableConfig config = SgdTable("abi_unknown", 2);
  ASSERT_EQ(strata_tf_create_table(client_, &config), 0);
  ASSERT_EQ(strata_tf_push_async(client_, "abi_unknown", &key, 1, 2, gradient,
                                 /*max_pending=*/1),
            0)
      << strata_tf_last_error_message();
  ASSERT_EQ(strata_tf_wait_for_pushes(client_), 0);
  float row[2];
  ASSERT_EQ(strata_tf_pull(client_, "abi_unknown", &key, 1, 2, row), 0);
  EXPECT_THAT(row, ElementsAre(-1, -1));
}

TEST_F(StrataTfClientTest, DestroyFinishesTheQueuedBackgroundPushes) {
  StrataTfTableConfig config = SgdTable("abi_drain", 2);
  ASSERT_EQ(strata_tf_create_table(client_, &config), 0);
  StrataTfClient* leaving = MakeClient(address_.c_str(), 30);
  ASSERT_NE(leaving, nullptr);
  const uint64_t key = 9;
  const float gradient[] = {1, 3};
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(strata_tf_push_async(leaving, "abi_drain", &key, 1, 2, gradient,
                                   /*max_pending=*/20),
              0);
  }
  strata_tf_client_destroy(leaving);  // no wait: destroy must finish them
  float row[2];
  ASSERT_EQ(strata_tf_pull(client_, "abi_drain", &key, 1, 2, row), 0);
  EXPECT_THAT(row, ElementsAre(-20, -60));
}

TEST_F(StrataTfClientTest, ErrorsCarryTheShardsCodeAndMessage) {
  const uint64_t key = 1;
  float row[2];
  EXPECT_EQ(strata_tf_pull(client_, "abi_nope", &key, 1, 2, row), kNotFound);
  EXPECT_THAT(strata_tf_last_error_message(),
              HasSubstr("unknown table 'abi_nope'"));

  StrataTfTableConfig config = SgdTable("abi_conf", 2);
  ASSERT_EQ(strata_tf_create_table(client_, &config), 0);
  config.learning_rate = 0.5f;
  EXPECT_EQ(strata_tf_create_table(client_, &config), kAlreadyExists);
  EXPECT_EQ(strata_tf_pull(client_, "abi_conf", &key, 1, 0, row),
            kInvalidArgument);
  config.optimizer = 99;
  EXPECT_EQ(strata_tf_create_table(client_, &config), kInvalidArgument);
}

TEST_F(StrataTfClientTest, LastErrorIsPerThread) {
  const uint64_t key = 1;
  float row[2];
  ASSERT_EQ(strata_tf_pull(client_, "abi_nope", &key, 1, 2, row), kNotFound);
  std::thread other([] {
    EXPECT_EQ(strata_tf_last_error_code(), 0);
    EXPECT_THAT(strata_tf_last_error_message(), StrEq(""));
  });
  other.join();
  EXPECT_EQ(strata_tf_last_error_code(), kNotFound);
}

TEST_F(StrataTfClientTest, ShardDownPastTheRetryDeadlineIsUnavailable) {
  StrataTfClient* impatient = MakeClient(address_.c_str(), 0.5);
  ASSERT_NE(impatient, nullptr);
  StrataTfTableConfig config = SgdTable("abi_down", 2);
  ASSERT_EQ(strata_tf_create_table(impatient, &config), 0);
  ASSERT_THAT(server_.Kill9(), IsOk());
  const uint64_t key = 1;
  float row[2];
  const int code = strata_tf_pull(impatient, "abi_down", &key, 1, 2, row);
  EXPECT_TRUE(code == kUnavailable || code == kDeadlineExceeded) << code;
  EXPECT_THAT(strata_tf_last_error_message(), HasSubstr(address_));
  strata_tf_client_destroy(impatient);
}

}  // namespace
}  // namespace strata
