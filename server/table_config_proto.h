#ifndef STRATA_SERVER_TABLE_CONFIG_PROTO_H_
#define STRATA_SERVER_TABLE_CONFIG_PROTO_H_

#include "absl/status/statusor.h"
#include "embedding/table_config.h"
#include "proto/strata.pb.h"

namespace strata {

// Wire -> engine. Zero numeric fields take the engine's defaults; an
// unspecified optimizer is Adagrad and an unspecified initializer is zeros.
absl::StatusOr<EmbeddingTableConfig> TableConfigFromProto(
    const v1::TableConfig& proto);
// Engine -> wire, every field filled in.
v1::TableConfig TableConfigToProto(const EmbeddingTableConfig& config);

}  // namespace strata

#endif  // STRATA_SERVER_TABLE_CONFIG_PROTO_H_
