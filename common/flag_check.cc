#include "common/flag_check.h"

#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace strata {

namespace {

// absl handles these itself and does not register them as flags.
bool IsUsageFlag(absl::string_view name) {
  return name == "help" || name == "helpfull" || name == "helpshort" ||
         name == "helppackage" || name == "version" ||
         name == "only_check_args" || name == "helpon" || name == "helpmatch";
}

}  // namespace

absl::Status CheckCommandLineFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    // Like absl: "--" ends the flags, "-" and words are positional.
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t equals = arg.find('=');
    const absl::string_view name = arg.substr(0, equals);
    const bool has_value = equals != absl::string_view::npos;
    if (IsUsageFlag(name)) continue;
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      // --noflag sets a boolean flag to false.
      absl::CommandLineFlag* negated =
          absl::FindCommandLineFlag(name.substr(2));
      if (negated != nullptr && negated->IsOfType<bool>()) continue;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    // absl reads --flagfile, --fromenv, --tryfromenv and --undefok itself
    // while it parses; setting them here would make it act twice.
    const bool absl_reads = name == "flagfile" || name == "fromenv" ||
                            name == "tryfromenv" || name == "undefok";
    if (flag->IsRetired() || absl_reads) {
      if (!has_value && !flag->IsOfType<bool>()) ++i;
      continue;
    }
    std::string value;
    if (has_value) {
      value = std::string(arg.substr(equals + 1));
    } else if (flag->IsOfType<bool>()) {
      value = "true";
    } else if (i + 1 < argc) {
      // absl takes the next argument as the value of a non-boolean flag.
      value = argv[++i];
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, " needs a value"));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid value '", value, "' for flag --", name,
                       error.empty() ? "" : ": ", error));
    }
  }
  return absl::OkStatus();
}

}  // namespace strata
