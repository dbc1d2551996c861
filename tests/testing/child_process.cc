#include "tests/testing/child_process.h"

#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace strata {
namespace testing {

absl::StatusOr<pid_t> SpawnThisTestAsChild(const std::string& gtest_filter,
                                           const std::string& variable,
                                           const std::string& value,
                                           bool quiet_stdout) {
  std::string self = "/proc/self/exe";
  std::string filter = absl::StrCat("--gtest_filter=", gtest_filter);
  char* argv[] = {self.data(), filter.data(), nullptr};
  std::vector<std::string> environment = {absl::StrCat(variable, "=", value)};
  for (char** entry = environ; *entry != nullptr; ++entry) {
    environment.push_back(*entry);
  }
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (quiet_stdout) {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null",
                                     O_WRONLY, 0);
  }
  pid_t child = 0;
  const int spawned =
      ::posix_spawn(&child, self.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::InternalError(absl::StrCat(
        "posix_spawn of ", self, " failed: ", std::strerror(spawned)));
  }
  return child;
}

}  // namespace testing
}  // namespace strata
