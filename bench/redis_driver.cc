// The Redis side of strata-bench: MGET / MSET of `batch` keys "k:<id>"
// whose values are one row's bytes, over one connection per thread with
// `inflight` commands pipelined (a sliding window: a new command goes out as
// soon as the oldest answer comes back).

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_run.h"
#include "common/fp16.h"

namespace strata {
namespace bench {
namespace {

struct RedisContextDeleter {
  void operator()(redisContext* context) const { redisFree(context); }
};
using RedisConnection = std::unique_ptr<redisContext, RedisContextDeleter>;

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

timeval TimevalFromMs(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

// Connects to host:port or unix:/path, with --timeout_ms on every read and
// write (the deadline of each command).
absl::StatusOr<RedisConnection> Connect(const BenchOptions& options) {
  const timeval timeout = TimevalFromMs(options.timeout_ms);
  RedisConnection connection;
  if (absl::StartsWith(options.redis, "unix:")) {
    connection.reset(
        redisConnectUnixWithTimeout(options.redis.substr(5).c_str(), timeout));
  } else {
    const size_t colon = options.redis.rfind(':');
    int port = 0;
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(options.redis.substr(colon + 1), &port)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--redis='", options.redis, "' is not host:port or unix:/path"));
    }
    connection.reset(redisConnectWithTimeout(
        options.redis.substr(0, colon).c_str(), port, timeout));
  }
  if (connection == nullptr || connection->err != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot connect to redis at ", options.redis, ": ",
        connection == nullptr ? "out of memory" : connection->errstr));
  }
  redisSetTimeout(connection.get(), timeout);
  return connection;
}

// One command's arguments, kept alive while hiredis formats it.
struct Command {
  std::vector<std::string> keys;
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
};

// MGET k:<id>... or MSET k:<id> <row> ...
void BuildCommand(absl::Span<const uint64_t> ids, bool set,
                  const std::string& row, Command& command) {
  command.keys.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    command.keys[i] = absl::StrCat("k:", ids[i]);
  }
  command.argv.assign(1, set ? "MSET" : "MGET");
  command.lengths.assign(1, 4);
  for (const std::string& key : command.keys) {
    command.argv.push_back(key.data());
    command.lengths.push_back(key.size());
    if (set) {
      command.argv.push_back(row.data());
      command.lengths.push_back(row.size());
    }
  }
}

// One benchmark thread with its own connection. Not thread-safe.
class RedisThread {
 public:
  RedisThread(const BenchOptions& options, int index,
              std::atomic<uint64_t>* next_load_key)
      : options_(options),
        set_(options.mode != "redis-pull"),
        next_load_key_(next_load_key) {
    const std::vector<float> row = MakeRow(options);
    if (options.fp16) {
      std::vector<uint16_t> halves(row.size());
      FloatsToHalves(row.data(), row.size(), halves.data());
      row_.assign(reinterpret_cast<const char*>(halves.data()),
                  halves.size() * sizeof(uint16_t));
    } else {
      row_.assign(reinterpret_cast<const char*>(row.data()),
                  row.size() * sizeof(float));
    }
    if (options.is_load()) {
      pool_.resize(1);
      return;
    }
    // Commands are copied into hiredis's buffer when appended, so any
    // entry may be reused at once: plain round robin.
    const auto batches = MakeKeyBatches(options, index, PoolSize(options));
    pool_.resize(batches.size());
    for (size_t i = 0; i < batches.size(); ++i) {
      BuildCommand(batches[i], set_, row_, pool_[i]);
    }
  }

  RunResult Run(const Window& window) {
    absl::StatusOr<RedisConnection> connection = Connect(options_);
    if (!connection.ok()) {
      result_.AddError("UNAVAILABLE",
                       std::string(connection.status().message()));
      return std::move(result_);
    }
    redis_ = *std::move(connection);
    for (int i = 0; i < options_.inflight; ++i) {
      if (!Append()) break;
    }
    while (!pending_.empty()) {
      void* raw = nullptr;
      if (redisGetReply(redis_.get(), &raw) != REDIS_OK) {
        // The connection is unusable; every command in flight is lost.
        result_.errors["REDIS_IO"] += pending_.size() - 1;
        result_.AddError("REDIS_IO", redis_->errstr);
        break;
      }
      Reply reply(static_cast<redisReply*>(raw));
      const Pending done = pending_.front();
      pending_.pop_front();
      const SteadyClock::time_point now = SteadyClock::now();
      if (CheckReply(*reply, done.keys)) {
        window.Complete(done.issued, now, done.keys, result_);
      }
      if (!window.Over(now)) Append();
    }
    return std::move(result_);
  }

 private:
  struct Pending {
    SteadyClock::time_point issued;
    uint64_t keys;
  };

  // Sends the next command; false when a load has no keys left.
  bool Append() {
    Command* command = &pool_[next_entry_++ % pool_.size()];
    if (options_.is_load()) {
      const uint64_t begin = next_load_key_->fetch_add(options_.batch);
      if (begin >= options_.num_keys) return false;
      const uint64_t end = std::min(begin + options_.batch, options_.num_keys);
      std::vector<uint64_t> ids(end - begin);
      for (uint64_t k = begin; k < end; ++k) ids[k - begin] = k;
      BuildCommand(ids, true, row_, *command);
    }
    pending_.push_back({SteadyClock::now(), command->keys.size()});
    redisAppendCommandArgv(redis_.get(), static_cast<int>(command->argv.size()),
                           command->argv.data(), command->lengths.data());
    // Send now rather than at the next redisGetReply, which writes only
    // once the replies already read are used up.
    int done = 0;
    while (!done && redisBufferWrite(redis_.get(), &done) == REDIS_OK) {
    }
    return true;
  }

  bool CheckReply(const redisReply& reply, uint64_t keys) {
    if (reply.type == REDIS_REPLY_ERROR) {
      result_.AddError("REDIS_ERROR", std::string(reply.str, reply.len));
      return false;
    }
    if (set_) {
      if (reply.type == REDIS_REPLY_STATUS) return true;
      result_.AddError("BAD_RESPONSE", "MSET did not answer OK");
      return false;
    }
    if (reply.type != REDIS_REPLY_ARRAY || reply.elements != keys) {
      result_.AddError("BAD_RESPONSE", "MGET answered no array of the keys");
      return false;
    }
    for (size_t i = 0; i < reply.elements; ++i) {
      const redisReply& value = *reply.element[i];
      if (value.type == REDIS_REPLY_NIL) {
        result_.AddError("NOT_FOUND",
                         "a key is missing: run --mode=redis-load");
        return false;
      }
      if (value.type != REDIS_REPLY_STRING ||
          static_cast<size_t>(value.len) != row_.size()) {
        result_.AddError("BAD_RESPONSE", absl::StrCat("a value is not ",
                                                      row_.size(), " bytes"));
        return false;
      }
    }
    return true;
  }

  const BenchOptions& options_;
  const bool set_;
  std::atomic<uint64_t>* next_load_key_;
  std::string row_;
  std::vector<Command> pool_;
  uint64_t next_entry_ = 0;
  RedisConnection redis_;
  std::deque<Pending> pending_;
  RunResult result_;
};

// Checks that Redis answers and, unless loading, holds the keys.
absl::Status CheckServer(const BenchOptions& options) {
  absl::StatusOr<RedisConnection> connection = Connect(options);
  if (!connection.ok()) return connection.status();
  if (options.is_load()) return absl::OkStatus();
  const std::string last = absl::StrCat("k:", options.num_keys - 1);
  Reply reply(static_cast<redisReply*>(
      redisCommand(connection->get(), "EXISTS %b", last.data(), last.size())));
  if (reply == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("redis at ", options.redis, ": ", (*connection)->errstr));
  }
  if (reply->type != REDIS_REPLY_INTEGER || reply->integer != 1) {
    return absl::NotFoundError(absl::StrCat("redis at ", options.redis,
                                            " holds no key ", last,
                                            ": run --mode=redis-load first"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RunResult> RunRedis(const BenchOptions& options) {
  absl::Status ready = CheckServer(options);
  if (!ready.ok()) return ready;
  std::atomic<uint64_t> next_load_key{0};
  std::vector<std::unique_ptr<RedisThread>> workers;
  for (int t = 0; t < options.threads; ++t) {
    workers.push_back(
        std::make_unique<RedisThread>(options, t, &next_load_key));
  }
  return RunThreads(options, workers.size(), [&](size_t t, const Window& w) {
    return workers[t]->Run(w);
  });
}

}  // namespace bench
}  // namespace strata
