#include "common/shard_map.h"

#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// Longer is no host:port anyone uses; the bound keeps maps small.
constexpr size_t kMaxAddressBytes = 256;

constexpr char kHeader[] = "# strata shard map: the owner of each bucket\n";

absl::Status Damaged(absl::string_view why) {
  return absl::DataLossError(absl::StrCat("shard map: ", why));
}

// "3*1024,1*1024" into owners.
absl::Status ParseRuns(absl::string_view text, std::vector<uint32_t>* owners) {
  for (absl::string_view run : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> parts =
        absl::StrSplit(run, absl::MaxSplits('*', 1));
    uint32_t shard = 0, count = 0;
    if (!absl::SimpleAtoi(parts.first, &shard) ||
        !absl::SimpleAtoi(parts.second, &count) || count == 0 ||
        owners->size() + count > kNumBuckets) {
      return Damaged(absl::StrCat("bad run of owners '", run, "'"));
    }
    owners->insert(owners->end(), count, shard);
  }
  return absl::OkStatus();
}

absl::Status CheckAddresses(const std::vector<std::string>& addresses,
                            uint32_t num_shards) {
  if (addresses.empty()) return absl::OkStatus();
  if (addresses.size() != num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard map has ", addresses.size(), " addresses for ",
                     num_shards, " shards"));
  }
  for (const std::string& address : addresses) {
    if (address.empty() || address.size() > kMaxAddressBytes ||
        address.find_first_of(", \t\n") != std::string::npos ||
        address.find(':') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard map address '", address.substr(0, kMaxAddressBytes),
          "' is not host:port"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

ShardMap ShardMap::Modulo(uint32_t num_shards) {
  if (num_shards == 0) num_shards = 1;
  std::vector<uint32_t> owners(kNumBuckets);
  for (uint32_t b = 0; b < kNumBuckets; ++b) {
    owners[b] = DefaultBucketOwner(b, num_shards);
  }
  return ShardMap(1, num_shards, std::move(owners));
}

absl::StatusOr<ShardMap> ShardMap::Create(uint64_t version, uint32_t num_shards,
                                          std::vector<uint32_t> owners,
                                          std::vector<std::string> addresses) {
  if (version == 0) {
    return absl::InvalidArgumentError("shard map version must be >= 1");
  }
  if (num_shards == 0) {
    return absl::InvalidArgumentError("shard map has no shards");
  }
  if (num_shards > kNumBuckets) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard map has ", num_shards, " shards, over the ",
                     kNumBuckets, " buckets there are to own"));
  }
  if (owners.size() != kNumBuckets) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard map has ", owners.size(), " bucket owners, not ", kNumBuckets));
  }
  for (uint32_t b = 0; b < kNumBuckets; ++b) {
    if (owners[b] >= num_shards) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard map gives bucket ", b, " to shard ", owners[b],
                       ", outside 0..", num_shards - 1));
    }
  }
  STRATA_RETURN_IF_ERROR(CheckAddresses(addresses, num_shards));
  return ShardMap(version, num_shards, std::move(owners), std::move(addresses));
}

std::vector<uint32_t> ShardMap::BucketsOf(uint32_t shard) const {
  std::vector<uint32_t> buckets;
  for (uint32_t b = 0; b < kNumBuckets; ++b) {
    if (owners_[b] == shard) buckets.push_back(b);
  }
  return buckets;
}

absl::StatusOr<ShardMap> ShardMap::WithOwner(uint32_t bucket,
                                             uint32_t shard) const {
  if (bucket >= kNumBuckets) {
    return absl::InvalidArgumentError(
        absl::StrCat("bucket ", bucket, " is outside 0..", kNumBuckets - 1));
  }
  if (shard >= num_shards_) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", shard, " is outside 0..", num_shards_ - 1));
  }
  std::vector<uint32_t> owners = owners_;
  owners[bucket] = shard;
  return ShardMap(version_ + 1, num_shards_, std::move(owners), addresses_);
}

std::string ShardMap::Serialize() const {
  std::vector<std::string> runs;
  for (uint32_t b = 0; b < kNumBuckets;) {
    uint32_t end = b + 1;
    while (end < kNumBuckets && owners_[end] == owners_[b]) ++end;
    runs.push_back(absl::StrCat(owners_[b], "*", end - b));
    b = end;
  }
  std::string body =
      absl::StrCat(kHeader, "version=", version_, "\nnum_shards=", num_shards_,
                   "\nowners=", absl::StrJoin(runs, ","), "\n");
  if (!addresses_.empty()) {
    absl::StrAppend(&body, "addresses=", absl::StrJoin(addresses_, ","), "\n");
  }
  absl::StrAppend(&body, "crc32c=", Crc32c(body), "\n");
  return body;
}

absl::StatusOr<ShardMap> ShardMap::Parse(absl::string_view text) {
  const size_t crc_at = text.rfind("crc32c=");
  if (crc_at == absl::string_view::npos) return Damaged("no crc32c line");
  uint32_t crc = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text.substr(crc_at + 7)),
                        &crc) ||
      Crc32c(text.substr(0, crc_at)) != crc) {
    return Damaged("crc32c does not match its contents");
  }
  uint64_t version = 0, num_shards = 0;
  std::vector<uint32_t> owners;
  std::vector<std::string> addresses;
  for (absl::string_view line : absl::StrSplit(text.substr(0, crc_at), '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (absl::ConsumePrefix(&line, "version=")) {
      if (!absl::SimpleAtoi(line, &version)) return Damaged("bad version");
    } else if (absl::ConsumePrefix(&line, "num_shards=")) {
      if (!absl::SimpleAtoi(line, &num_shards) || num_shards > kNumBuckets) {
        return Damaged("bad num_shards");
      }
    } else if (absl::ConsumePrefix(&line, "owners=")) {
      if (absl::Status s = ParseRuns(line, &owners); !s.ok()) return s;
    } else if (absl::ConsumePrefix(&line, "addresses=")) {
      addresses = absl::StrSplit(line, ',');
    } else {
      return Damaged(absl::StrCat("unknown line '", line, "'"));
    }
  }
  absl::StatusOr<ShardMap> map =
      Create(version, static_cast<uint32_t>(num_shards), std::move(owners),
             std::move(addresses));
  if (!map.ok()) return Damaged(map.status().message());
  return map;
}

std::string ShardMap::Summary() const {
  std::vector<size_t> counts(num_shards_, 0);
  for (uint32_t owner : owners_) ++counts[owner];
  return absl::StrCat("version ", version_, ", ", num_shards_, " shards (",
                      absl::StrJoin(counts, ", "), " buckets)");
}

absl::Status ShardMapMismatchError(absl::string_view message,
                                   uint64_t current_version) {
  absl::Status status = absl::FailedPreconditionError(message);
  status.SetPayload(kShardMapVersionPayload,
                    absl::Cord(absl::StrCat(current_version)));
  return status;
}

std::optional<uint64_t> ShardMapVersionOf(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kFailedPrecondition) {
    return std::nullopt;
  }
  auto payload = status.GetPayload(kShardMapVersionPayload);
  uint64_t version = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &version)) {
    return std::nullopt;
  }
  return version;
}

}  // namespace strata
