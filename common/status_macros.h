#ifndef STRATA_COMMON_STATUS_MACROS_H_
#define STRATA_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the current function when `expr` (an absl::Status) is not OK.
// Same meaning as the ABSL_RETURN_IF_ERROR of later Abseil releases.
#define STRATA_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    const ::absl::Status strata_status_ = (expr);    \
    if (!strata_status_.ok()) return strata_status_; \
  } while (0)

#define STRATA_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define STRATA_STATUS_MACROS_CONCAT_(x, y) \
  STRATA_STATUS_MACROS_CONCAT_INNER_(x, y)

// STRATA_ASSIGN_OR_RETURN(lhs, rexpr): evaluates `rexpr` (an absl::StatusOr),
// returns its status on error, else moves the value into `lhs`.
#define STRATA_ASSIGN_OR_RETURN(lhs, rexpr) \
  STRATA_ASSIGN_OR_RETURN_IMPL_(            \
      STRATA_STATUS_MACROS_CONCAT_(strata_statusor_, __LINE__), lhs, rexpr)

#define STRATA_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // STRATA_COMMON_STATUS_MACROS_H_
