#include "worker/async_pusher.h"

#include <utility>

#include "client/ps_client.h"

namespace strata {

AsyncPusher::AsyncPusher(PsClient* ps, std::string table, int max_pending,
                         bool distinct_keys)
    : ps_(ps),
      table_(std::move(table)),
      max_pending_(static_cast<size_t>(max_pending)),
      distinct_keys_(distinct_keys),
      thread_([this] { Loop(); }) {}

AsyncPusher::~AsyncPusher() {
  (void)Drain();
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

absl::Status AsyncPusher::Push(std::vector<uint64_t> keys,
                               std::vector<float> gradients,
                               uint64_t global_step) {
  absl::MutexLock lock(&mu_);
  auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !error_.ok() || queue_.size() + in_flight_ < max_pending_;
  };
  mu_.Await(absl::Condition(&room));
  if (!error_.ok()) return error_;
  queue_.push_back(Job{std::move(keys), std::move(gradients), global_step});
  return absl::OkStatus();
}

absl::Status AsyncPusher::Drain() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !error_.ok() || (queue_.empty() && in_flight_ == 0);
  };
  mu_.Await(absl::Condition(&idle));
  return error_;
}

int64_t AsyncPusher::pushed_keys() const {
  absl::MutexLock lock(&mu_);
  return pushed_keys_;
}

void AsyncPusher::Loop() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&work));
      if (queue_.empty()) return;  // stopping
      job = std::move(queue_.front());
      queue_.pop_front();
      ++in_flight_;
    }
    const absl::Status status =
        distinct_keys_
            ? ps_->PushDistinct(table_, job.keys, job.gradients,
                                job.global_step)
            : ps_->Push(table_, job.keys, job.gradients, job.global_step);
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (status.ok()) {
      pushed_keys_ += static_cast<int64_t>(job.keys.size());
    } else if (error_.ok()) {
      error_ = status;
      queue_.clear();
    }
  }
}

}  // namespace strata
