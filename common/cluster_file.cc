#include "common/cluster_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/config_field_error.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace strata {
namespace {

constexpr int kMaxWorkers = 65536;

bool IsFlagName(absl::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

// A flag value: a scalar, or a list of scalars joined with commas.
absl::StatusOr<std::string> FlagValue(const YAML::Node& node,
                                      absl::string_view field,
                                      const ConfigFieldError& error) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsNull()) return std::string();
  if (node.IsSequence()) {
    std::vector<std::string> items;
    for (const YAML::Node& item : node) {
      if (!item.IsScalar()) {
        return error(field, "a list value may hold only scalars");
      }
      items.push_back(item.Scalar());
    }
    return absl::StrJoin(items, ",");
  }
  return error(field, "must be a scalar or a list of scalars");
}

absl::StatusOr<ClusterFlagList> ParseFlags(const YAML::Node& node,
                                           absl::string_view field,
                                           const ConfigFieldError& error) {
  ClusterFlagList flags;
  if (!node || node.IsNull()) return flags;
  if (!node.IsMap()) return error(field, "must be a map of flag: value");
  for (const auto& entry : node) {
    if (!entry.first.IsScalar() || !IsFlagName(entry.first.Scalar())) {
      return error(field, "flag names are letters, digits and '_'");
    }
    const std::string name = entry.first.Scalar();
    const std::string name_field = absl::StrCat(field, ".", name);
    if (name == "cluster_file") {
      return error(name_field, "a cluster file cannot name another");
    }
    STRATA_ASSIGN_OR_RETURN(std::string value,
                            FlagValue(entry.second, name_field, error));
    flags.emplace_back(name, std::move(value));
  }
  return flags;
}

absl::Status CheckAddress(absl::string_view address, absl::string_view field,
                          const ConfigFieldError& error) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return error(field, absl::StrCat("'", address,
                                     "' is not host:port with a port in "
                                     "1..65535"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseAddresses(
    const YAML::Node& node, absl::string_view field,
    const ConfigFieldError& error,
    std::vector<std::vector<std::string>>* replicas) {
  if (!node || !node.IsSequence() || node.size() == 0) {
    return error(field, "must be a non-empty list of host:port");
  }
  std::vector<std::string> addresses;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string item_field = absl::StrCat(field, "[", i, "]");
    std::vector<std::string> members;
    if (replicas != nullptr && node[i].IsSequence()) {
      // A replicated shard: the list of its replicas.
      if (node[i].size() < 1 || node[i].size() > 3) {
        return error(item_field, "must list 1 to 3 replicas");
      }
      for (size_t r = 0; r < node[i].size(); ++r) {
        const std::string replica_field = absl::StrCat(item_field, "[", r, "]");
        if (!node[i][r].IsScalar())
          return error(replica_field, "must be host:port");
        STRATA_RETURN_IF_ERROR(
            CheckAddress(node[i][r].Scalar(), replica_field, error));
        members.push_back(node[i][r].Scalar());
      }
    } else {
      if (!node[i].IsScalar()) return error(item_field, "must be host:port");
      STRATA_RETURN_IF_ERROR(CheckAddress(node[i].Scalar(), item_field, error));
      members.push_back(node[i].Scalar());
    }
    if (replicas != nullptr) {
      if (!replicas->empty() && replicas->front().size() != members.size()) {
        return error(item_field,
                     absl::StrCat("lists ", members.size(),
                                  " replicas but the first shard lists ",
                                  replicas->front().size()));
      }
      replicas->push_back(members);
    }
    addresses.push_back(absl::StrJoin(members, "|"));
  }
  return addresses;
}

absl::Status CheckKeys(const YAML::Node& node, absl::string_view field,
                       const std::vector<absl::string_view>& allowed,
                       const ConfigFieldError& error) {
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    bool known = false;
    for (absl::string_view name : allowed) known = known || key == name;
    if (!known) {
      return error(absl::StrCat(field, ".", key),
                   absl::StrCat("unknown field (expected one of ",
                                absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ClusterGroup> ParseGroup(const YAML::Node& root,
                                        absl::string_view name,
                                        bool has_addresses,
                                        const ConfigFieldError& error) {
  ClusterGroup group;
  const YAML::Node node = root[std::string(name)];
  if (!node || node.IsNull()) return group;
  if (!node.IsMap()) return error(name, "must be a map");
  group.present = true;
  const std::vector<absl::string_view> allowed =
      has_addresses
          ? std::vector<absl::string_view>{"addresses", "flags", "member_flags"}
          : std::vector<absl::string_view>{"count", "flags", "member_flags"};
  STRATA_RETURN_IF_ERROR(CheckKeys(node, name, allowed, error));
  if (has_addresses) {
    STRATA_ASSIGN_OR_RETURN(
        group.addresses,
        ParseAddresses(node["addresses"], absl::StrCat(name, ".addresses"),
                       error, name == "shards" ? &group.replicas : nullptr));
    group.count = static_cast<int>(group.addresses.size());
  } else {
    const YAML::Node count = node["count"];
    if (!count || !count.IsScalar() ||
        !absl::SimpleAtoi(count.Scalar(), &group.count) || group.count < 1 ||
        group.count > kMaxWorkers) {
      return error(absl::StrCat(name, ".count"),
                   absl::StrCat("must be an integer in 1..", kMaxWorkers));
    }
  }
  STRATA_ASSIGN_OR_RETURN(
      group.flags,
      ParseFlags(node["flags"], absl::StrCat(name, ".flags"), error));
  const YAML::Node members = node["member_flags"];
  const std::string members_field = absl::StrCat(name, ".member_flags");
  if (members && !members.IsNull()) {
    if (!members.IsSequence()) return error(members_field, "must be a list");
    if (static_cast<int>(members.size()) > group.count) {
      return error(members_field,
                   absl::StrCat("has ", members.size(), " entries for ",
                                group.count, " members"));
    }
    for (size_t i = 0; i < members.size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(
          ClusterFlagList flags,
          ParseFlags(members[i], absl::StrCat(members_field, "[", i, "]"),
                     error));
      group.member_flags.push_back(std::move(flags));
    }
  }
  return group;
}

absl::StatusOr<std::vector<std::string>> ParseEtcd(
    const YAML::Node& root, const ConfigFieldError& error) {
  const YAML::Node node = root["etcd"];
  if (!node || node.IsNull()) return std::vector<std::string>();
  if (!node.IsMap()) return error("etcd", "must be a map");
  STRATA_RETURN_IF_ERROR(CheckKeys(node, "etcd", {"endpoints"}, error));
  return ParseAddresses(node["endpoints"], "etcd.endpoints", error, nullptr);
}

absl::StatusOr<ClusterFile> ParseRoot(const YAML::Node& root,
                                      absl::string_view path) {
  const ConfigFieldError error("cluster file", path);
  if (!root.IsMap()) return error("(top level)", "must be a map");
  STRATA_RETURN_IF_ERROR(
      CheckKeys(root, "(top level)",
                {"version", "etcd", "shards", "serving", "workers"}, error));
  const YAML::Node version = root["version"];
  if (!version || !version.IsScalar() || version.Scalar() != "1") {
    return error("version", "must be 1");
  }
  ClusterFile cluster;
  cluster.path = std::string(path);
  STRATA_ASSIGN_OR_RETURN(cluster.shards,
                          ParseGroup(root, "shards", true, error));
  if (!cluster.shards.present) {
    return error("shards", "is required (the training shards' addresses)");
  }
  STRATA_ASSIGN_OR_RETURN(cluster.serving,
                          ParseGroup(root, "serving", true, error));
  // One address: the serving PS's Service on a cluster, or its one process
  // on a machine. Replicas behind a Service share their flags.
  if (cluster.serving.present && cluster.serving.count != 1) {
    return error("serving.addresses", "must hold exactly one address");
  }
  STRATA_ASSIGN_OR_RETURN(cluster.workers,
                          ParseGroup(root, "workers", false, error));
  STRATA_ASSIGN_OR_RETURN(cluster.etcd_endpoints, ParseEtcd(root, error));
  if (cluster.shards.replicas.front().size() > 1 &&
      cluster.etcd_endpoints.empty()) {
    return error("etcd.endpoints",
                 "is required when shards have replicas (their leases and "
                 "membership live in etcd)");
  }
  return cluster;
}

std::string PortOf(absl::string_view address) {
  return std::string(address.substr(address.rfind(':') + 1));
}

void AppendFlags(const ClusterFlagList& flags, int index, int replica,
                 std::vector<std::string>& out) {
  const std::string index_text = absl::StrCat(index);
  const std::string replica_text = absl::StrCat(replica);
  for (const auto& [name, value] : flags) {
    out.push_back(absl::StrCat(
        "--", name, "=",
        absl::StrReplaceAll(
            value, {{"{index}", index_text}, {"{replica}", replica_text}})));
  }
}

absl::Status CheckIndex(const ClusterFile& cluster, const ClusterGroup& group,
                        absl::string_view group_name,
                        absl::string_view index_flag, int index) {
  if (!group.present) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster file ", cluster.path, " has no '", group_name, "' section"));
  }
  if (index < 0 || index >= group.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", index_flag, "=", index, " but cluster file ",
                     cluster.path, " names ", group.count, " ", group_name,
                     " (0..", group.count - 1, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterFile> ParseClusterFile(absl::string_view text,
                                             absl::string_view path) {
  // yaml-cpp reports malformed documents by throwing; nothing else here does.
  try {
    return ParseRoot(YAML::Load(std::string(text)), path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster file ", path, ": line ", e.mark.line + 1,
                     ", column ", e.mark.column + 1, ": ", e.msg));
  }
}

absl::StatusOr<ClusterFile> ReadClusterFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read cluster file ", path,
                                            ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseClusterFile(text.str(), path);
}

absl::StatusOr<std::vector<std::string>> ClusterFlagsFor(
    const ClusterFile& cluster, ClusterRole role, int index, int replica) {
  std::vector<std::string> out;
  const std::string shards = absl::StrJoin(cluster.shards.addresses, ",");
  const ClusterGroup* group = nullptr;
  switch (role) {
    case ClusterRole::kShard: {
      STRATA_RETURN_IF_ERROR(
          CheckIndex(cluster, cluster.shards, "shards", "shard_index", index));
      const std::vector<std::string>& members = cluster.shards.replicas[index];
      if (replica < 0 || replica >= static_cast<int>(members.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--replica_index=", replica, " but cluster file ", cluster.path,
            " lists ", members.size(), " replicas of shard ", index));
      }
      out.push_back(absl::StrCat("--num_shards=", cluster.shards.count));
      out.push_back(absl::StrCat("--port=", PortOf(members[replica])));
      if (!cluster.etcd_endpoints.empty()) {
        out.push_back(absl::StrCat("--etcd_endpoints=",
                                   absl::StrJoin(cluster.etcd_endpoints, ",")));
        out.push_back(absl::StrCat("--replicas=", members.size()));
        out.push_back(absl::StrCat("--replica_id=r", replica));
        out.push_back(absl::StrCat("--advertise_address=", members[replica]));
      }
      group = &cluster.shards;
      break;
    }
    case ClusterRole::kServing:
      STRATA_RETURN_IF_ERROR(
          CheckIndex(cluster, cluster.serving, "serving", "index", index));
      out.push_back(absl::StrCat("--shards=", shards));
      out.push_back(
          absl::StrCat("--port=", PortOf(cluster.serving.addresses[index])));
      group = &cluster.serving;
      break;
    case ClusterRole::kWorker:
      STRATA_RETURN_IF_ERROR(
          CheckIndex(cluster, cluster.workers, "workers", "rank", index));
      out.push_back(absl::StrCat("--shards=", shards));
      out.push_back(absl::StrCat("--num_workers=", cluster.workers.count));
      group = &cluster.workers;
      break;
    case ClusterRole::kClient:
      out.push_back(absl::StrCat("--shards=", shards));
      if (cluster.serving.present) {
        out.push_back(
            absl::StrCat("--serving=", cluster.serving.addresses.front()));
      }
      return out;
  }
  AppendFlags(group->flags, index, replica, out);
  if (index < static_cast<int>(group->member_flags.size())) {
    AppendFlags(group->member_flags[index], index, replica, out);
  }
  return out;
}

}  // namespace strata
