// stratactl feature-key: the PS key a Criteo-format categorical value trains,
// so that a row can be pulled or looked up by the value a log line holds.

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tools/json_writer.h"
#include "tools/stratactl_commands.h"
#include "worker/data/criteo_format.h"

namespace strata {
namespace tools_internal {

int FeatureKeyCommand(const CommandContext& context) {
  int field = 0;
  if (!absl::SimpleAtoi(context.args[0], &field) || field < 1 ||
      field > kCriteoNumCategorical) {
    return UsageError(absl::StrCat("feature-key: field '", context.args[0],
                                   "' is not 1..", kCriteoNumCategorical,
                                   " (C1..C26)"));
  }
  std::vector<uint64_t> keys;
  for (size_t i = 1; i < context.args.size(); ++i) {
    const std::string& value = context.args[i];
    uint32_t parsed = 0;
    if (value == "-") {
      keys.push_back(CriteoMissingKey(field - 1));
    } else if (ParseCriteoHex(value, &parsed)) {
      keys.push_back(CriteoFeatureKey(field - 1, parsed));
    } else {
      return UsageError(absl::StrCat("feature-key: '", value,
                                     "' is not 8 hex digits or - (empty)"));
    }
  }
  if (context.json) {
    JsonWriter json;
    json.BeginArray();
    for (uint64_t key : keys) json.Uint(key);
    json.EndArray();
    PrintLine(json.text());
    return kExitOk;
  }
  for (uint64_t key : keys) PrintLine(absl::StrCat(key));
  return kExitOk;
}

}  // namespace tools_internal
}  // namespace strata
