#ifndef STRATA_TESTS_TESTING_SERVER_PROCESS_H_
#define STRATA_TESTS_TESTING_SERVER_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace strata {
namespace testing {

// Makes a fresh directory under ::testing::TempDir() with mkdtemp and removes
// it, with everything in it, on destruction. Not thread-safe.
class TempDir {
 public:
  // `prefix` becomes the start of the directory's name. Aborts the test
  // program when mkdtemp fails: nothing sensible can follow.
  explicit TempDir(const std::string& prefix = "strata");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// How a child process ended: exit_code for a normal exit, signal otherwise.
struct ProcessExit {
  int exit_code = -1;  // -1 when killed by a signal.
  int signal = 0;      // 0 when it exited.
  std::string ToString() const;
};

inline std::ostream& operator<<(std::ostream& os, const ProcessExit& exit) {
  return os << exit.ToString();
}

struct ServerProcessOptions {
  // The program: a name in StrataBinDir(), or a path. Any Strata daemon
  // that takes --port, --port_file and --data_dir (strata-server,
  // strata-serving) fits.
  std::string binary = "strata-server";
  // Extra flags, each a whole "--name=value" argument.
  std::vector<std::string> flags;
  // The store's directory. Default: "data" in the process's own temporary
  // directory, removed with it.
  std::string data_dir;
  // False leaves --data_dir off the command line (to test its absence).
  bool pass_data_dir = true;
  // --port; 0 picks a free one (reported back through --port_file).
  int port = 0;
  // False: a program that is not a daemon (strata-worker): no --port,
  // --port_file or --data_dir; start it with Launch() and Wait() for it.
  bool daemon_flags = true;
  // How long Start() waits for the port file.
  absl::Duration start_deadline = absl::Seconds(30);
};

// A strata-server (or options.binary) child process for tests: started
// with --port=0 and a --port_file it waits for, stdout and stderr in a log
// file (one per run), stopped with SIGKILL or SIGTERM, and restartable on
// the same data_dir.
//
// The binary is $STRATA_BIN_DIR/<binary> (set by strata_cc_test), else
// <binary> next to the running test binary.
//
// The child is started with PR_SET_PDEATHSIG = SIGKILL, so that a crashing
// test leaves no server behind; the kernel sends it when the *thread* that
// started the child exits, so start servers from the test's own thread.
// The destructor kills the child (SIGKILL) if it is still running, and only
// that child, and prints the logs of every run when the test has failed
// (they are removed with the temporary directory). Not thread-safe.
//
// Example:
//   ServerProcessOptions options;
//   options.flags = {"--durability=sync"};
//   ServerProcess server(options);
//   ASSERT_THAT(server.Start(), IsOk());
//   auto stub = v1::ParameterServer::NewStub(grpc::CreateChannel(
//       server.address(), grpc::InsecureChannelCredentials()));
//   ...
//   ASSERT_THAT(server.Kill9(), IsOk());
//   ASSERT_THAT(server.Start(), IsOk());  // Same data_dir, new port.
class ServerProcess {
 public:
  explicit ServerProcess(ServerProcessOptions options = {});
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts the server and waits until it has written its port file. Errors:
  // FAILED_PRECONDITION when it is already running, INTERNAL when it cannot
  // be spawned or exits first (the message holds its exit status and log),
  // DEADLINE_EXCEEDED when no port file appears in time (the child is then
  // killed). May be called again after the server stopped: a restart on the
  // same data_dir, normally on a new port.
  absl::Status Start();

  // Start() on the port of the last run, and on it again for later starts
  // (the server's listener sets SO_REUSEADDR, so it can rebind right after
  // a kill). For clients that must find a restarted shard where it was.
  absl::Status StartOnSamePort();

  // Starts the server and waits for it to exit, for configurations that
  // must fail. FAILED_PRECONDITION (the child is killed) when it starts
  // serving instead, DEADLINE_EXCEEDED when it neither exits nor serves.
  absl::StatusOr<ProcessExit> RunUntilExit(
      absl::Duration deadline = absl::Seconds(30));

  // Starts the program without waiting for anything (for programs that run
  // to completion); Wait() for its exit.
  absl::Status Launch();
  // Waits for the child to exit; DEADLINE_EXCEEDED (with the log) when it
  // has not in time. The child is left running then.
  absl::StatusOr<ProcessExit> Wait(absl::Duration deadline);

  // SIGKILL, then reaps the child. FAILED_PRECONDITION when not running.
  absl::Status Kill9();
  // SIGTERM, then waits for the exit; on DEADLINE_EXCEEDED the child is
  // killed with SIGKILL.
  absl::StatusOr<ProcessExit> Terminate(
      absl::Duration deadline = absl::Seconds(30));

  bool running() const { return pid_ > 0; }
  // Reaps the child if it has exited; true when it is not running.
  bool HasExited() { return Reap(); }
  pid_t pid() const { return pid_; }
  // Bound gRPC port of the current (or last) run.
  int port() const { return port_; }
  // "127.0.0.1:<port>".
  std::string address() const;
  const std::string& data_dir() const { return data_dir_; }
  // The log (stdout and stderr) of the current or last run.
  std::string log() const;
  const std::string& log_path() const { return log_path_; }
  // Waits until the current run's log contains `text` (a line may reach the
  // log after the port file). DEADLINE_EXCEEDED, with the log, otherwise.
  absl::Status WaitForLog(absl::string_view text,
                          absl::Duration deadline = absl::Seconds(10)) const;
  // How the last run ended, if it did.
  const std::optional<ProcessExit>& last_exit() const { return last_exit_; }

 private:
  absl::Status Spawn();
  // Reaps the child if it exited; returns true then.
  bool Reap();
  absl::StatusOr<ProcessExit> WaitForExit(absl::Duration deadline);
  // The port in the port file, or nullopt while there is none.
  std::optional<int> ReadPortFile() const;

  ServerProcessOptions options_;
  std::string name_;  // The binary's name, for messages.
  TempDir dir_;
  std::string binary_;
  std::string data_dir_;
  std::string port_file_;
  std::string log_path_;
  int runs_ = 0;
  pid_t pid_ = -1;
  int port_ = 0;
  std::optional<ProcessExit> last_exit_;
};

// The directory that holds strata-server: $STRATA_BIN_DIR, else that of the
// running executable.
std::string StrataBinDir();

// Reads a whole file; empty when it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);

// A resident-memory field of /proc/<pid>/status ("VmRSS", "VmHWM" for the
// peak) in MiB. NOT_FOUND when it cannot be read.
absl::StatusOr<uint64_t> ResidentMiB(pid_t pid, const std::string& field);

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_SERVER_PROCESS_H_
