#ifndef STRATA_COMMON_PRIMARY_REDIRECT_H_
#define STRATA_COMMON_PRIMARY_REDIRECT_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace strata {

// A replica of a replicated shard that is not its primary refuses calls
// with FAILED_PRECONDITION whose message names the primary; clients of a
// replica group (PsClient, the serving PS) move to the replica it names.

// "; the primary is <address> (<detail>)", the part of the message that
// clients read.
std::string PrimaryRedirectText(absl::string_view address,
                                absl::string_view detail);

// The primary's address a refusal names; nullopt for any other status.
std::optional<std::string> RedirectedPrimary(const absl::Status& status);

}  // namespace strata

#endif  // STRATA_COMMON_PRIMARY_REDIRECT_H_
