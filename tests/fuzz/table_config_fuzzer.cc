// libFuzzer target: a CreateTableRequest from any bytes, through what a
// shard does with it before creating anything (TableConfigFromProto, then
// ValidateTableConfig). Every input gives a config or an error; a config it
// accepts survives the round trip through its serialized form unchanged.

#include <cstddef>
#include <cstdint>

#include "embedding/table_config.h"
#include "proto/strata.pb.h"
#include "server/table_config_proto.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata::v1::CreateTableRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<strata::EmbeddingTableConfig> config =
      strata::TableConfigFromProto(request.config());
  if (!config.ok()) return 0;
  if (!strata::ValidateTableConfig(*config).ok()) return 0;
  absl::StatusOr<strata::EmbeddingTableConfig> again =
      strata::TableConfigFromProto(strata::TableConfigToProto(*config));
  if (!again.ok() || !strata::SameTableConfig(*config, *again)) {
    __builtin_trap();
  }
  return 0;
}
