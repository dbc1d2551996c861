// The transport ceiling of strata-bench: what the same pulls cost when the
// server does no work.
//  - ceiling-server: a gRPC ParameterServer whose Pull answers from
//    responses serialized once per key count (no lookup, no copy of rows:
//    the answer shares the cached bytes), and a plain TCP server that
//    answers a frame of keys with as many rows from one preallocated
//    buffer. Runs until SIGTERM or SIGINT.
//  - pull (the ordinary mode) against the ceiling server's gRPC port gives
//    gRPC's ceiling; tcp-pull gives the socket's: one connection per
//    thread, `inflight` requests pipelined on it.
// Frames on the TCP socket: a little-endian uint32 byte count, then the
// bytes (the keys as uint64, or the rows as float32).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "bench/bench_run.h"
#include "common/command_line.h"
#include "grpcpp/grpcpp.h"
#include "proto/strata.grpc.pb.h"

namespace strata {
namespace bench {
namespace {

// Pull answered from cached serialized responses, one per (keys, encoding).
class CeilingService final
    : public v1::ParameterServer::WithRawCallbackMethod_Pull<
          v1::ParameterServer::CallbackService> {
 public:
  CeilingService(std::string table, uint32_t dim)
      : table_(std::move(table)), dim_(dim) {}

  // strata-bench checks the table before it pulls: one, of --table and
  // --dim.
  grpc::ServerUnaryReactor* ListTables(
      grpc::CallbackServerContext* context, const v1::ListTablesRequest*,
      v1::ListTablesResponse* response) override {
    v1::TableInfo* info = response->add_tables();
    info->mutable_config()->set_name(table_);
    info->mutable_config()->set_dim(dim_);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    v1::PullRequest parsed;
    grpc::Slice slice;
    if (!request->DumpToSingleSlice(&slice).ok() ||
        !parsed.ParseFromArray(slice.begin(), static_cast<int>(slice.size())) ||
        parsed.batches_size() != 1) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "the ceiling answers one batch per pull"));
      return reactor;
    }
    *response = Answer(static_cast<size_t>(parsed.batches(0).keys_size()),
                       parsed.encoding() == v1::FLOAT16);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  grpc::ByteBuffer Answer(size_t keys, bool fp16) {
    absl::MutexLock lock(&mu_);
    auto [it, added] = answers_.try_emplace(std::make_pair(keys, fp16));
    if (added) {
      v1::PullResponse answer;
      v1::TableBatch* batch = answer.add_batches();
      if (fp16) {
        batch->mutable_values_fp16()->assign(keys * dim_ * 2, '\x11');
      } else {
        batch->mutable_values()->Resize(static_cast<int>(keys * dim_), 0.5f);
      }
      const std::string bytes = answer.SerializeAsString();
      grpc::Slice slice(bytes);
      it->second = grpc::ByteBuffer(&slice, 1);
    }
    return it->second;  // Shares the cached slice.
  }

  const std::string table_;
  const uint32_t dim_;
  absl::Mutex mu_;
  std::map<std::pair<size_t, bool>, grpc::ByteBuffer> answers_
      ABSL_GUARDED_BY(mu_);
};

bool ReadFully(int fd, void* data, size_t size) {
  char* out = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, out, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool WriteFully(int fd, const void* data, size_t size) {
  const char* in = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, in, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    in += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// One connection: a frame of keys in, a frame of rows out, until EOF.
void ServeTcpConnection(int fd, uint32_t dim, size_t max_keys) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const std::vector<float> rows(max_keys * dim, 0.5f);
  std::vector<char> keys(max_keys * sizeof(uint64_t));
  while (true) {
    uint32_t bytes = 0;
    if (!ReadFully(fd, &bytes, sizeof(bytes))) break;
    if (bytes > keys.size() || bytes % sizeof(uint64_t) != 0) break;
    if (!ReadFully(fd, keys.data(), bytes)) break;
    const uint32_t answer =
        static_cast<uint32_t>(bytes / sizeof(uint64_t) * dim * sizeof(float));
    if (!WriteFully(fd, &answer, sizeof(answer)) ||
        !WriteFully(fd, rows.data(), answer)) {
      break;
    }
  }
  ::close(fd);
}

absl::StatusOr<int> ListenTcp(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(fd);
    return absl::InternalError(
        absl::StrCat("cannot listen on 127.0.0.1: ", std::strerror(errno)));
  }
  *port = ntohs(address.sin_port);
  return fd;
}

absl::StatusOr<int> ConnectTcp(const std::string& address) {
  std::vector<std::string> parts = absl::StrSplit(address, ':');
  int port = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tcp: \"", address, "\" is not host:port"));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || ::inet_pton(AF_INET, parts[0].c_str(), &server.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof(server)) !=
          0) {
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", address,
                                               ": ", std::strerror(errno)));
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// One thread of tcp-pull: `inflight` connections, one frame outstanding
// on each (as gRPC keeps `inflight` calls on its one connection), so that
// neither side ever waits to write while the other waits to write too.
RunResult TcpPullThread(const BenchOptions& options, size_t thread,
                        const Window& window) {
  RunResult result;
  std::vector<int> fds;
  for (int i = 0; i < options.inflight; ++i) {
    absl::StatusOr<int> fd = ConnectTcp(options.tcp);
    if (!fd.ok()) {
      result.AddError("UNAVAILABLE", std::string(fd.status().message()));
      for (int open : fds) ::close(open);
      return result;
    }
    fds.push_back(*fd);
  }
  const auto batches =
      MakeKeyBatches(options, static_cast<int>(thread), PoolSize(options));
  std::vector<std::string> frames;
  for (const auto& keys : batches) {
    const uint32_t bytes =
        static_cast<uint32_t>(keys.size() * sizeof(uint64_t));
    std::string frame(sizeof(bytes) + bytes, '\0');
    std::memcpy(frame.data(), &bytes, sizeof(bytes));
    std::memcpy(frame.data() + sizeof(bytes), keys.data(), bytes);
    frames.push_back(std::move(frame));
  }
  std::vector<float> rows(size_t{options.batch} * options.dim);
  std::vector<SteadyClock::time_point> issued(fds.size());
  std::vector<uint64_t> keys(fds.size());
  std::vector<pollfd> polls(fds.size());
  size_t next = 0;
  auto send = [&](size_t c) {
    const size_t i = next++ % frames.size();
    issued[c] = SteadyClock::now();
    keys[c] = batches[i].size();
    return WriteFully(fds[c], frames[i].data(), frames[i].size());
  };
  bool ok = true;
  size_t active = 0;
  for (size_t c = 0; c < fds.size() && ok; ++c) {
    ok = send(c);
    polls[c] = pollfd{fds[c], POLLIN, 0};
    ++active;
  }
  while (ok && active > 0) {
    if (::poll(polls.data(), polls.size(), 10000) <= 0) {
      ok = false;
      break;
    }
    for (size_t c = 0; c < polls.size() && ok; ++c) {
      if (polls[c].fd < 0 || polls[c].revents == 0) continue;
      uint32_t bytes = 0;
      ok = ReadFully(fds[c], &bytes, sizeof(bytes)) &&
           bytes <= rows.size() * sizeof(float) &&
           ReadFully(fds[c], rows.data(), bytes);
      if (!ok) break;
      const SteadyClock::time_point now = SteadyClock::now();
      window.Complete(issued[c], now, keys[c], result);
      if (window.Over(now)) {
        polls[c].fd = -1;  // poll() skips it from now on.
        --active;
      } else {
        ok = send(c);
      }
    }
  }
  if (!ok) result.AddError("UNAVAILABLE", "a TCP connection failed");
  for (int fd : fds) ::close(fd);
  return result;
}

std::atomic<bool> stop_requested{false};
void RequestStop(int) { stop_requested = true; }

}  // namespace

absl::Status RunCeilingServer(const BenchOptions& options,
                              const std::string& port_file,
                              const std::string& tcp_port_file) {
  CeilingService service(options.table, options.dim);
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &grpc_port);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return absl::InternalError("gRPC server failed");
  int tcp_port = 0;
  absl::StatusOr<int> listener = ListenTcp(&tcp_port);
  if (!listener.ok()) return listener.status();
  // Connections are served on detached threads until the process exits.
  std::thread([fd = *listener, dim = options.dim, batch = options.batch] {
    while (true) {
      const int connection = ::accept(fd, nullptr, nullptr);
      if (connection < 0) {
        if (errno == EINTR) continue;
        return;
      }
      std::thread(ServeTcpConnection, connection, dim, size_t{batch}).detach();
    }
  }).detach();
  for (const auto& [path, port] : {std::make_pair(tcp_port_file, tcp_port),
                                   std::make_pair(port_file, grpc_port)}) {
    if (path.empty()) continue;
    if (absl::Status s = WritePortFile(path, port); !s.ok()) return s;
  }
  std::printf("ceiling-server: grpc=127.0.0.1:%d tcp=127.0.0.1:%d dim=%u\n",
              grpc_port, tcp_port, options.dim);
  std::fflush(stdout);
  ::signal(SIGTERM, RequestStop);
  ::signal(SIGINT, RequestStop);
  while (!stop_requested) ::usleep(100 * 1000);
  server->Shutdown();
  return absl::OkStatus();
}

absl::StatusOr<RunResult> RunTcpPull(const BenchOptions& options) {
  return RunThreads(options, static_cast<size_t>(options.threads),
                    [&](size_t thread, const Window& window) {
                      return TcpPullThread(options, thread, window);
                    });
}

}  // namespace bench
}  // namespace strata
