#ifndef STRATA_COMMON_FLAG_CHECK_H_
#define STRATA_COMMON_FLAG_CHECK_H_

#include "absl/status/status.h"

namespace strata {

// Checks the flags in argv the way absl::ParseCommandLine will parse them:
// every flag must be defined and its value must parse. Returns
// INVALID_ARGUMENT naming the first offender.
//
// Why: absl::ParseCommandLine reports such errors itself and exits with
// status 1, which our programs reserve for runtime errors;
// strata::ParseCommandLine calls this first to report them as usage errors
// (status 2). Parsing a value stores it in the flag, which
// the real parse then stores again.
absl::Status CheckCommandLineFlags(int argc, char** argv);

}  // namespace strata

#endif  // STRATA_COMMON_FLAG_CHECK_H_
