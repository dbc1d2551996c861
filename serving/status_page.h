#ifndef STRATA_SERVING_STATUS_PAGE_H_
#define STRATA_SERVING_STATUS_PAGE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/rate_history.h"
#include "proto/strata.pb.h"

namespace strata {

// The serving PS's status as an HTML page that reloads itself every
// `refresh_seconds`: charts of `history` (ServingService::SampleTraffic:
// lookups/s, keys/s, lookup p99, the largest lag), the shards it follows
// (connected, sequences, updates behind, lag), its tables and rows, and its
// lookup counters. The numbers
// are those of /metrics at the same moment; elements carry ids (shard-N,
// table-NAME, keys-total, ...) so that scripts and tests can read them.
std::string RenderStatusPage(const v1::ServingStatusResponse& status,
                             uint64_t keys_total, uint64_t missing_keys_total,
                             const std::vector<RateSample>& history,
                             int refresh_seconds);

}  // namespace strata

#endif  // STRATA_SERVING_STATUS_PAGE_H_
