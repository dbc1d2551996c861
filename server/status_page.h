#ifndef STRATA_SERVER_STATUS_PAGE_H_
#define STRATA_SERVER_STATUS_PAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "embedding/embedding_store.h"
#include "server/replication/replica_group.h"
#include "server/request_metrics.h"
#include "server/traffic_history.h"

namespace strata {

// What a training shard's /status page shows.
struct ShardStatusView {
  uint32_t shard_index = 0;
  uint32_t num_shards = 1;
  std::string durability;
  std::vector<TableStats> tables;
  StorageStats storage;
  const RequestMetrics* metrics = nullptr;
  std::vector<TrafficSample> history;
  // Set for a replicated shard.
  const ReplicaGroupStatus* replication = nullptr;
};

// The shard's status as an HTML page that reloads itself every
// `refresh_seconds`: charts of the last minutes (requests/s, keys/s, p99
// latency of Pull and Push), its tables (rows, memory, admission,
// eviction), requests by method (count, errors, p50/p99 since start), the
// store, and its replica group. The numbers are those of /metrics at the
// same moment; elements carry ids (table-NAME, method-Pull, chart-requests,
// ...) so that scripts and tests can read them.
std::string RenderShardStatusPage(const ShardStatusView& view,
                                  int refresh_seconds);

}  // namespace strata

#endif  // STRATA_SERVER_STATUS_PAGE_H_
