#include "tests/testing/server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace strata {
namespace testing {
namespace {

// How often the waits below look at the child and its port file. Every wait
// is bounded by a deadline; this only sets the reaction time.
constexpr absl::Duration kPollInterval = absl::Milliseconds(2);

std::string ErrnoText(int error) { return std::strerror(error); }

}  // namespace

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

std::string StrataBinDir() {
  if (const char* dir = std::getenv("STRATA_BIN_DIR");
      dir != nullptr && *dir != '\0') {
    return dir;
  }
  std::error_code error;
  const std::filesystem::path self =
      std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return ".";
  return self.parent_path().string();
}

TempDir::TempDir(const std::string& prefix) {
  std::string base = ::testing::TempDir();
  if (base.empty()) base = "/tmp/";
  if (base.back() != '/') base += '/';
  std::string pattern = absl::StrCat(base, prefix, ".XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::fprintf(stderr, "mkdtemp(%s) failed: %s\n", pattern.c_str(),
                 ErrnoText(errno).c_str());
    std::abort();
  }
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code error;
  std::filesystem::remove_all(path_, error);
}

std::string ProcessExit::ToString() const {
  if (signal != 0) {
    return absl::StrCat("killed by signal ", signal, " (", strsignal(signal),
                        ")");
  }
  return absl::StrCat("exit code ", exit_code);
}

ServerProcess::ServerProcess(ServerProcessOptions options)
    : options_(std::move(options)),
      name_(std::filesystem::path(options_.binary).filename().string()),
      dir_(name_),
      binary_(options_.binary.find('/') == std::string::npos
                  ? StrataBinDir() + "/" + options_.binary
                  : options_.binary),
      data_dir_(options_.data_dir.empty() ? dir_.path() + "/data"
                                          : options_.data_dir),
      port_file_(dir_.path() + "/port"),
      port_(options_.port) {}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  // The logs go with the temporary directory: show them when they may
  // explain a failure.
  if (::testing::Test::HasFailure()) {
    constexpr size_t kTail = 6000;
    for (int run = 1; run <= runs_; ++run) {
      const std::string path =
          absl::StrCat(dir_.path(), "/server.", run, ".log");
      std::string text = ReadFileOrEmpty(path);
      if (text.size() > kTail) text = "..." + text.substr(text.size() - kTail);
      std::fprintf(stderr, "---- %s ----\n%s", path.c_str(), text.c_str());
    }
  }
}

std::string ServerProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

std::string ServerProcess::log() const { return ReadFileOrEmpty(log_path_); }

absl::Status ServerProcess::Spawn() {
  if (running()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, " is already running as pid ", pid_));
  }
  if (::access(binary_.c_str(), X_OK) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot execute ", binary_, ": ", ErrnoText(errno),
                     " (build the ", name_, " target, or set STRATA_BIN_DIR)"));
  }
  ++runs_;
  log_path_ = absl::StrCat(dir_.path(), "/server.", runs_, ".log");
  // A port file left by the previous run must not pass for this run's.
  std::remove(port_file_.c_str());
  last_exit_.reset();

  std::vector<std::string> args = {binary_};
  if (options_.daemon_flags) {
    args.push_back(absl::StrCat("--port=", options_.port));
    args.push_back(absl::StrCat("--port_file=", port_file_));
    if (options_.pass_data_dir) args.push_back("--data_dir=" + data_dir_);
  }
  args.insert(args.end(), options_.flags.begin(), options_.flags.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const int log_fd =
      ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_fd < 0 || null_fd < 0) {
    if (log_fd >= 0) ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
    return absl::InternalError(
        absl::StrCat("cannot open ", log_path_, ": ", ErrnoText(errno)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child of a multi-threaded parent: async-signal-safe calls only.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // Exec keeps ignored signals ignored and the mask: start from defaults.
    for (int signal : {SIGTERM, SIGINT, SIGPIPE, SIGCHLD}) {
      ::signal(signal, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    static const char kMessage[] = "server_process: execv failed\n";
    [[maybe_unused]] ssize_t ignored =
        ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    ::_exit(127);
  }
  const int fork_error = errno;
  ::close(log_fd);
  ::close(null_fd);
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("fork failed: ", ErrnoText(fork_error)));
  }
  pid_ = pid;
  return absl::OkStatus();
}

bool ServerProcess::Reap() {
  if (pid_ <= 0) return true;
  int status = 0;
  const pid_t done = ::waitpid(pid_, &status, WNOHANG);
  if (done != pid_) return false;
  ProcessExit exit;
  if (WIFEXITED(status)) {
    exit.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit.signal = WTERMSIG(status);
  }
  last_exit_ = exit;
  pid_ = -1;
  return true;
}

absl::StatusOr<ProcessExit> ServerProcess::WaitForExit(
    absl::Duration deadline) {
  const absl::Time give_up = absl::Now() + deadline;
  while (!Reap()) {
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          name_, " (pid ", pid_, ") did not exit within ",
          absl::FormatDuration(deadline), "; log ", log_path_, ":\n", log()));
    }
    absl::SleepFor(kPollInterval);
  }
  return *last_exit_;
}

absl::Status ServerProcess::WaitForLog(absl::string_view text,
                                       absl::Duration deadline) const {
  const absl::Time give_up = absl::Now() + deadline;
  while (!absl::StrContains(log(), text)) {
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no \"", text, "\" in the log of ", name_, " within ",
          absl::FormatDuration(deadline), "; log ", log_path_, ":\n", log()));
    }
    absl::SleepFor(kPollInterval);
  }
  return absl::OkStatus();
}

std::optional<int> ServerProcess::ReadPortFile() const {
  const std::string text = ReadFileOrEmpty(port_file_);
  int port = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &port) || port <= 0) {
    return std::nullopt;
  }
  return port;
}

absl::Status ServerProcess::Start() {
  if (absl::Status spawned = Spawn(); !spawned.ok()) return spawned;
  const absl::Time give_up = absl::Now() + options_.start_deadline;
  while (true) {
    if (std::optional<int> port = ReadPortFile()) {
      port_ = *port;
      return absl::OkStatus();
    }
    if (Reap()) {
      return absl::InternalError(absl::StrCat(name_, " exited before serving (",
                                              last_exit_->ToString(), "); log ",
                                              log_path_, ":\n", log()));
    }
    if (absl::Now() > give_up) {
      ::kill(pid_, SIGKILL);
      (void)WaitForExit(absl::Seconds(10));
      return absl::DeadlineExceededError(
          absl::StrCat(name_, " wrote no port file within ",
                       absl::FormatDuration(options_.start_deadline), "; log ",
                       log_path_, ":\n", log()));
    }
    absl::SleepFor(kPollInterval);
  }
}

absl::Status ServerProcess::Launch() { return Spawn(); }

absl::StatusOr<ProcessExit> ServerProcess::Wait(absl::Duration deadline) {
  return WaitForExit(deadline);
}

absl::Status ServerProcess::StartOnSamePort() {
  if (port_ <= 0) {
    return absl::FailedPreconditionError(name_ + " has not served yet");
  }
  options_.port = port_;
  return Start();
}

absl::StatusOr<ProcessExit> ServerProcess::RunUntilExit(
    absl::Duration deadline) {
  if (absl::Status spawned = Spawn(); !spawned.ok()) return spawned;
  const absl::Time give_up = absl::Now() + deadline;
  while (!Reap()) {
    if (std::optional<int> port = ReadPortFile()) {
      port_ = *port;
      ::kill(pid_, SIGKILL);
      (void)WaitForExit(absl::Seconds(10));
      return absl::FailedPreconditionError(
          absl::StrCat(name_, " started serving on port ", *port,
                       " instead of exiting; log ", log_path_, ":\n", log()));
    }
    if (absl::Now() > give_up) {
      ::kill(pid_, SIGKILL);
      (void)WaitForExit(absl::Seconds(10));
      return absl::DeadlineExceededError(absl::StrCat(
          name_, " neither exited nor served within ",
          absl::FormatDuration(deadline), "; log ", log_path_, ":\n", log()));
    }
    absl::SleepFor(kPollInterval);
  }
  return *last_exit_;
}

absl::Status ServerProcess::Kill9() {
  if (!running()) {
    return absl::FailedPreconditionError(name_ + " is not running");
  }
  if (::kill(pid_, SIGKILL) != 0) {
    return absl::InternalError(
        absl::StrCat("kill(", pid_, ", SIGKILL): ", ErrnoText(errno)));
  }
  absl::StatusOr<ProcessExit> exit = WaitForExit(absl::Seconds(30));
  return exit.status();
}

absl::StatusOr<ProcessExit> ServerProcess::Terminate(absl::Duration deadline) {
  if (!running()) {
    return absl::FailedPreconditionError(name_ + " is not running");
  }
  if (::kill(pid_, SIGTERM) != 0) {
    return absl::InternalError(
        absl::StrCat("kill(", pid_, ", SIGTERM): ", ErrnoText(errno)));
  }
  absl::StatusOr<ProcessExit> exit = WaitForExit(deadline);
  if (!exit.ok()) {
    ::kill(pid_, SIGKILL);
    (void)WaitForExit(absl::Seconds(10));
  }
  return exit;
}

absl::StatusOr<uint64_t> ResidentMiB(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(status, line);) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, field + ":")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, " kB");
    uint64_t kb = 0;
    if (!absl::SimpleAtoi(rest, &kb)) break;
    return kb / 1024;
  }
  return absl::NotFoundError(absl::StrCat("no ", field, " for pid ", pid));
}

}  // namespace testing
}  // namespace strata
