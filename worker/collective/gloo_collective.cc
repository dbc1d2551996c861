// CreateGlooCollective: Gloo's TCP transport, rendezvous through a training
// shard's Rendezvous service.
//
// Gloo reports every failure by throwing (gloo::IoException for I/O and
// timeouts, gloo::EnforceNotMet for its own invariants, gloo::Exception and
// std:: exceptions otherwise). Every call into Gloo here goes through
// CatchGloo, which turns them into a status: nothing Gloo throws leaves this
// file.

#include "worker/collective/gloo_collective.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"

namespace strata {
namespace {

// A job id longer than this would push the rendezvous keys past the
// shard's limit of 256 bytes.
constexpr size_t kMaxJobIdBytes = 128;
// Gloo adds its timeouts to clock readings, and waits up to five times the
// timeout for a peer's TCP connection: a day is far beyond any step and far
// from overflowing (Gloo's own "no timeout" stands for 100 hours).
constexpr absl::Duration kMaxTimeout = absl::Hours(24);

// Gloo's timeouts are exceptions like any other; their messages say so
// ("Timed out waiting 2000ms for recv operation to complete", "Read timeout
// ...", "Connect timeout ...", "Wait timeout for key(s): ...").
bool IsTimeoutMessage(absl::string_view message) {
  const std::string lower = absl::AsciiStrToLower(message);
  return absl::StrContains(lower, "timeout") ||
         absl::StrContains(lower, "timed out");
}

// Runs `body` and returns what it threw as a status: DEADLINE_EXCEEDED for
// a timeout, UNAVAILABLE for other I/O failures (a peer closed its
// connection), FAILED_PRECONDITION for an operation Gloo refuses, INTERNAL
// for a broken Gloo invariant or anything else.
template <typename Body>
absl::Status CatchGloo(Body body) {
  try {
    body();
    return absl::OkStatus();
  } catch (const gloo::InvalidOperationException& e) {
    return absl::FailedPreconditionError(e.what());
  } catch (const gloo::Exception& e) {  // gloo::IoException among them.
    if (IsTimeoutMessage(e.what())) {
      return absl::DeadlineExceededError(e.what());
    }
    return absl::UnavailableError(e.what());
  } catch (const gloo::EnforceNotMet& e) {
    return absl::InternalError(absl::StrCat("gloo check failed: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo threw: ", e.what()));
  } catch (...) {
    return absl::InternalError("gloo threw an unknown exception");
  }
}

void SumFloats(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// Gloo's rendezvous store over a RendezvousClient, under a key prefix. Gloo
// expects get() and wait() to block until the keys are there, and a failure
// to throw: this store throws gloo::IoException and keeps the status it
// came from, so that CreateGlooCollective can return that (a refused token
// stays PERMISSION_DENIED, a missing rank DEADLINE_EXCEEDED naming its
// key). Every wait ends at the collective's rendezvous deadline at the
// latest. Used by one thread (connectFullMesh); not thread-safe.
class RendezvousGlooStore final : public gloo::rendezvous::Store {
 public:
  RendezvousGlooStore(RendezvousClient* client, std::string prefix,
                      absl::Time deadline)
      : client_(client), prefix_(std::move(prefix)), deadline_(deadline) {}
  RendezvousGlooStore(const RendezvousGlooStore&) = delete;
  RendezvousGlooStore& operator=(const RendezvousGlooStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override {
    ThrowIfError(client_->Set(prefix_ + key,
                              absl::string_view(data.data(), data.size())));
  }

  std::vector<char> get(const std::string& key) override {
    const std::string& value = Fetch(key, deadline_);
    return std::vector<char>(value.begin(), value.end());
  }

  void wait(const std::vector<std::string>& keys) override {
    wait(keys, gloo::kNoTimeout);
  }

  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    absl::Time until = deadline_;
    if (timeout > gloo::kNoTimeout) {
      until = std::min(until, Clock::Real()->Now() + absl::FromChrono(timeout));
    }
    for (const std::string& key : keys) Fetch(key, until);
  }

  // OK, or why the store last threw.
  const absl::Status& error() const { return error_; }

 private:
  // The value under `key`, read once (Gloo's keys are written once): wait()
  // reads the values that get() then returns.
  const std::string& Fetch(const std::string& key, absl::Time until) {
    auto it = fetched_.find(key);
    if (it != fetched_.end()) return it->second;
    const absl::Duration left =
        std::max(until - Clock::Real()->Now(), absl::ZeroDuration());
    absl::StatusOr<std::string> value = client_->Get(prefix_ + key, left);
    ThrowIfError(value.status());
    return fetched_.emplace(key, *std::move(value)).first->second;
  }

  void ThrowIfError(const absl::Status& status) {
    if (status.ok()) return;
    error_ = status;
    throw gloo::IoException(status.ToString());
  }

  RendezvousClient* const client_;
  const std::string prefix_;
  const absl::Time deadline_;
  absl::flat_hash_map<std::string, std::string> fetched_;
  absl::Status error_;
};

// A connected full mesh of ranks. After a failed operation the mesh is in
// an unknown state (a peer may be mid-operation), so every later call fails
// with FAILED_PRECONDITION.
class GlooCollective final : public Collective {
 public:
  GlooCollective(std::shared_ptr<gloo::Context> context,
                 std::chrono::milliseconds timeout, std::string job_id)
      : context_(std::move(context)),
        timeout_(timeout),
        job_id_(std::move(job_id)) {}

  int rank() const override { return context_->rank; }
  int world_size() const override { return context_->size; }
  const char* backend() const override { return "gloo"; }

  absl::Status AllreduceSum(absl::Span<float> data) override {
    if (!failure_.ok()) return Unusable();
    // Every rank passes the same size, so all of them skip together.
    if (world_size() == 1 || data.empty()) return absl::OkStatus();
    return Run(absl::StrCat("allreduce of ", data.size(), " floats"), [&] {
      gloo::AllreduceOptions options(context_);
      options.setOutput(data.data(), data.size());
      options.setReduceFunction(&SumFloats);
      options.setTimeout(timeout_);
      gloo::allreduce(options);
    });
  }

  absl::Status Broadcast(absl::Span<float> data, int root) override {
    if (!failure_.ok()) return Unusable();
    if (root < 0 || root >= world_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "broadcast root ", root, " is not a rank of 0..", world_size() - 1));
    }
    if (world_size() == 1 || data.empty()) return absl::OkStatus();
    return Run(
        absl::StrCat("broadcast of ", data.size(), " floats from rank ", root),
        [&] {
          gloo::BroadcastOptions options(context_);
          options.setOutput(data.data(), data.size());
          options.setRoot(root);
          options.setTimeout(timeout_);
          gloo::broadcast(options);
        });
  }

  absl::Status Barrier() override {
    if (!failure_.ok()) return Unusable();
    if (world_size() == 1) return absl::OkStatus();
    return Run("barrier", [&] {
      gloo::BarrierOptions options(context_);
      options.setTimeout(timeout_);
      gloo::barrier(options);
    });
  }

 private:
  template <typename Body>
  absl::Status Run(const std::string& what, Body body) {
    const absl::Status status = CatchGloo(body);
    if (status.ok()) return status;
    failure_ = absl::Status(
        status.code(),
        absl::StrCat("gloo ", what, " (job '", job_id_, "', rank ", rank(),
                     " of ", world_size(), "): ", status.message()));
    return failure_;
  }

  absl::Status Unusable() const {
    return absl::FailedPreconditionError(
        absl::StrCat("gloo collective is unusable after an earlier failure: ",
                     failure_.message()));
  }

  const std::shared_ptr<gloo::Context> context_;
  const std::chrono::milliseconds timeout_;
  const std::string job_id_;
  absl::Status failure_;
};

// The numeric address of `host` that this machine can listen on: the
// first one getaddrinfo(3) gives that a socket binds to, as Gloo itself
// chooses. Gloo gets the number, never a name: its own lookup reads an
// uninitialized pointer when getaddrinfo fails (Debian's
// 0.0~git20220518: a misspelt host crashes the process instead of
// throwing). INVALID_ARGUMENT when the name is unknown or no address is
// local; UNAVAILABLE when the resolver failed for now (EAI_AGAIN).
absl::StatusOr<std::string> NumericListenAddress(const std::string& host) {
  struct addrinfo hints;
  std::memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* found = nullptr;
  const int rv = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rv != 0) {
    const std::string message =
        absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rv));
    if (rv == EAI_AGAIN) return absl::UnavailableError(message);
    return absl::InvalidArgumentError(message);
  }
  std::string numeric;
  int bind_errno = 0;
  for (const struct addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const bool bound = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!bound) bind_errno = errno;
    close(fd);
    char text[NI_MAXHOST];
    if (bound && getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text),
                             nullptr, 0, NI_NUMERICHOST) == 0) {
      numeric = text;
      break;
    }
  }
  freeaddrinfo(found);
  if (numeric.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot listen on host '", host, "': ",
        bind_errno != 0 ? std::strerror(bind_errno) : "no usable address"));
  }
  return numeric;
}

absl::Status CheckOptions(const GlooCollectiveOptions& options) {
  if (options.rendezvous == nullptr) {
    return absl::InvalidArgumentError("gloo collective: rendezvous is null");
  }
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo collective: world_size ", options.world_size, " is below 1"));
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo collective: rank ", options.rank, " is outside 0..",
                     options.world_size - 1));
  }
  if (options.job_id.empty() || options.job_id.size() > kMaxJobIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo collective: job_id must have 1 to ", kMaxJobIdBytes,
                     " bytes, not ", options.job_id.size()));
  }
  if (options.host.empty()) {
    return absl::InvalidArgumentError("gloo collective: host is empty");
  }
  if (options.timeout < absl::Milliseconds(1) ||
      options.timeout > kMaxTimeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo collective: timeout ", absl::FormatDuration(options.timeout),
        " is outside 1ms..", absl::FormatDuration(kMaxTimeout)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> CreateGlooCollective(
    const GlooCollectiveOptions& options) {
  if (absl::Status status = CheckOptions(options); !status.ok()) return status;
  const std::string where =
      absl::StrCat("gloo rendezvous of job '", options.job_id, "', rank ",
                   options.rank, " of ", options.world_size, ": ");
  const std::chrono::milliseconds timeout =
      absl::ToChronoMilliseconds(options.timeout);

  absl::StatusOr<std::string> address = NumericListenAddress(options.host);
  if (!address.ok()) {
    return absl::Status(address.status().code(),
                        absl::StrCat(where, address.status().message()));
  }
  std::shared_ptr<gloo::transport::Device> device;
  absl::Status status = CatchGloo([&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = *address;
    device = gloo::transport::tcp::CreateDevice(attr);
  });
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat(where, "cannot open a Gloo device on ",
                                     *address, ": ", status.message()));
  }

  // The world size is part of the prefix: a rank started with another world
  // size does not meet the others (they time out) instead of misreading
  // their address lists.
  RendezvousGlooStore store(
      options.rendezvous,
      absl::StrCat("gloo/", options.job_id, "/", options.world_size, "/"),
      Clock::Real()->Now() + options.timeout);
  std::shared_ptr<gloo::rendezvous::Context> context;
  status = CatchGloo([&] {
    context = std::make_shared<gloo::rendezvous::Context>(options.rank,
                                                          options.world_size);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
  });
  if (!status.ok()) {
    const absl::Status& cause = store.error().ok() ? status : store.error();
    const bool late = cause.code() == absl::StatusCode::kDeadlineExceeded;
    return absl::Status(
        cause.code(),
        absl::StrCat(
            where,
            late ? absl::StrCat("not every rank joined within ",
                                absl::FormatDuration(options.timeout), ": ")
                 : "",
            cause.message()));
  }
  return std::make_unique<GlooCollective>(std::move(context), timeout,
                                          options.job_id);
}

}  // namespace strata
