#ifndef STRATA_COMMON_CONFIG_FIELD_ERROR_H_
#define STRATA_COMMON_CONFIG_FIELD_ERROR_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace strata {

// Errors of a configuration file that name the file and the field at fault,
// for the YAML files people write (the cluster file, the worker's model
// config):
//
//   const ConfigFieldError error("cluster file", path);
//   return error("shards.flags.port", "must be a number");
//   // INVALID_ARGUMENT "cluster file c.yaml: shards.flags.port: must be ..."
class ConfigFieldError {
 public:
  ConfigFieldError(absl::string_view kind, absl::string_view path)
      : prefix_(absl::StrCat(kind, " ", path, ": ")) {}

  absl::Status operator()(absl::string_view field,
                          absl::string_view problem) const {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix_, field, ": ", problem));
  }

 private:
  std::string prefix_;
};

}  // namespace strata

#endif  // STRATA_COMMON_CONFIG_FIELD_ERROR_H_
