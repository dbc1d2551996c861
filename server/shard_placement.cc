#include "server/shard_placement.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace strata {
namespace {

std::string PlacementPath(const std::string& data_dir) {
  return absl::StrCat(data_dir, "/", kShardPlacementFile);
}

// One "name=value" line of the file into *value; false when `line` is not
// that field or its value is not a number.
bool ParseField(absl::string_view line, absl::string_view name,
                uint64_t* value) {
  if (!absl::ConsumePrefix(&line, name) || !absl::ConsumePrefix(&line, "=")) {
    return false;
  }
  return absl::SimpleAtoi(absl::StripAsciiWhitespace(line), value);
}

}  // namespace

std::string ShardPlacement::ToString() const {
  return absl::StrCat("shard ", shard_index, " of ", num_shards,
                      " (bucket map version ", map_version, ")");
}

absl::StatusOr<ShardPlacement> ReadShardPlacement(FileSystem& files,
                                                  const std::string& data_dir) {
  const std::string path = PlacementPath(data_dir);
  if (!files.Exists(path)) {
    return absl::NotFoundError(absl::StrCat("no ", path));
  }
  absl::StatusOr<std::string> text = files.ReadFile(path);
  if (!text.ok()) return text.status();
  uint64_t index = 0, count = 0, version = 0;
  bool has_index = false, has_count = false, has_version = false;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (ParseField(line, "shard_index", &index)) {
      has_index = true;
    } else if (ParseField(line, "num_shards", &count)) {
      has_count = true;
    } else if (ParseField(line, "map_version", &version)) {
      has_version = true;
    } else {
      return absl::DataLossError(
          absl::StrCat(path, ": cannot read the line '", line, "'"));
    }
  }
  if (!has_index || !has_count || !has_version || count == 0 ||
      index >= count || count > UINT32_MAX || version == 0) {
    return absl::DataLossError(absl::StrCat(
        path,
        " does not hold a valid placement (shard_index < num_shards, "
        "map_version >= 1): '",
        *text, "'"));
  }
  ShardPlacement placement;
  placement.shard_index = static_cast<uint32_t>(index);
  placement.num_shards = static_cast<uint32_t>(count);
  placement.map_version = version;
  return placement;
}

absl::Status WriteShardPlacement(FileSystem& files, const std::string& data_dir,
                                 const ShardPlacement& placement) {
  return files.WriteFileAtomically(
      PlacementPath(data_dir),
      absl::StrCat("# Which keys this strata-server data directory holds; "
                   "written when it was first used.\nshard_index=",
                   placement.shard_index, "\nnum_shards=", placement.num_shards,
                   "\nmap_version=", placement.map_version, "\n"));
}

absl::Status CheckShardPlacement(FileSystem& files, const std::string& data_dir,
                                 const ShardPlacement& wanted) {
  absl::StatusOr<ShardPlacement> recorded = ReadShardPlacement(files, data_dir);
  if (absl::IsNotFound(recorded.status())) {
    return WriteShardPlacement(files, data_dir, wanted);
  }
  if (!recorded.ok()) return recorded.status();
  if (*recorded == wanted) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the data directory ", data_dir, " holds the rows of ",
      recorded->ToString(), ", but this shard was started as ",
      wanted.ToString(),
      ": its rows would route to other shards and be unreachable. Start it "
      "with --shard_index=",
      recorded->shard_index, " --num_shards=", recorded->num_shards,
      "; the shard count changes through stratactl reshard (online) or "
      "reshard-checkpoint (offline) (",
      PlacementPath(data_dir), " records the placement)"));
}

}  // namespace strata
