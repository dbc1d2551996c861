#include "common/primary_redirect.h"

#include "absl/strings/str_cat.h"

namespace strata {
namespace {

constexpr absl::string_view kMarker = "; the primary is ";

}  // namespace

std::string PrimaryRedirectText(absl::string_view address,
                                absl::string_view detail) {
  return absl::StrCat(kMarker, address, " (", detail, ")");
}

std::optional<std::string> RedirectedPrimary(const absl::Status& status) {
  if (!absl::IsFailedPrecondition(status)) return std::nullopt;
  const size_t at = status.message().find(kMarker);
  if (at == absl::string_view::npos) return std::nullopt;
  absl::string_view rest = status.message().substr(at + kMarker.size());
  rest = rest.substr(0, rest.find(' '));
  if (rest.empty()) return std::nullopt;
  return std::string(rest);
}

}  // namespace strata
