// stratactl commands that read and write rows: pull and push.

#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "tools/json_writer.h"
#include "tools/stratactl_commands.h"

ABSL_FLAG(std::string, keys, "",
          "pull, push: comma-separated keys (unsigned 64-bit integers); pull "
          "also takes them as arguments.");
ABSL_FLAG(std::string, gradients, "",
          "push: comma-separated gradients, keys*dim of them, row-major.");
ABSL_FLAG(std::string, file, "",
          "push: read gradients from this file ('-' for stdin), one line per "
          "key: \"key g1 g2 ... gdim\"; '#' starts a comment.");

namespace strata {
namespace tools_internal {
namespace {

// Splits on commas and whitespace, dropping empty pieces.
std::vector<std::string> SplitList(absl::string_view text) {
  return absl::StrSplit(text, absl::ByAnyChar(", \t\r\n"), absl::SkipEmpty());
}

absl::Status ParseKey(absl::string_view text, std::vector<uint64_t>& keys) {
  uint64_t key = 0;
  // SimpleAtoi accepts a leading '+' and, for unsigned types, rejects '-'.
  if (text.empty() || text[0] == '+' || !absl::SimpleAtoi(text, &key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key '", text, "' is not an unsigned 64-bit integer"));
  }
  keys.push_back(key);
  return absl::OkStatus();
}

absl::Status ParseGradient(absl::string_view text,
                           std::vector<float>& gradients) {
  float value = 0;
  if (!absl::SimpleAtof(text, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("gradient '", text, "' is not a finite number"));
  }
  gradients.push_back(value);
  return absl::OkStatus();
}

// Keys from the arguments after the table name and from --keys.
absl::StatusOr<std::vector<uint64_t>> KeysFromArgs(
    const CommandContext& context) {
  std::string text = absl::GetFlag(FLAGS_keys);
  for (size_t i = 1; i < context.args.size(); ++i) {
    absl::StrAppend(&text, ",", context.args[i]);
  }
  std::vector<uint64_t> keys;
  for (const std::string& piece : SplitList(text)) {
    absl::Status status = ParseKey(piece, keys);
    if (!status.ok()) return status;
  }
  return keys;
}

// The dimension of `table`, from the cluster.
absl::StatusOr<uint32_t> TableDim(PsClient& client, const std::string& table) {
  absl::StatusOr<std::vector<v1::TableInfo>> tables = client.ListTables();
  if (!tables.ok()) return tables.status();
  for (const v1::TableInfo& info : *tables) {
    if (info.config().name() == table) return info.config().dim();
  }
  return absl::NotFoundError(
      absl::StrCat("unknown table '", table, "' (see 'stratactl tables')"));
}

// Reads "key g1 ... gdim" lines. Errors name the file and line.
absl::Status ReadGradientFile(const std::string& path, uint32_t dim,
                              std::vector<uint64_t>& keys,
                              std::vector<float>& gradients) {
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    if (!file) {
      return absl::InvalidArgumentError(
          absl::StrCat("--file: cannot open '", path, "'"));
    }
  }
  std::istream& in = path == "-" ? std::cin : file;
  std::string line;
  for (size_t number = 1; std::getline(in, line); ++number) {
    const std::vector<std::string> fields =
        SplitList(line.substr(0, line.find('#')));
    if (fields.empty()) continue;
    const std::string where = absl::StrCat(path, ":", number, ": ");
    if (fields.size() != 1 + size_t{dim}) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "expected a key and ", dim, " gradients, got ",
                       fields.size(), " fields"));
    }
    absl::Status status = ParseKey(fields[0], keys);
    for (size_t i = 1; status.ok() && i < fields.size(); ++i) {
      status = ParseGradient(fields[i], gradients);
    }
    if (!status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, status.message()));
    }
  }
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--file: error reading '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

int PullCommand(const CommandContext& context) {
  const std::string& table = context.args[0];
  absl::StatusOr<std::vector<uint64_t>> keys = KeysFromArgs(context);
  if (!keys.ok()) return UsageError(keys.status().message());
  if (keys->empty()) {
    return UsageError("usage: stratactl pull TABLE KEY[,KEY...] (or --keys)");
  }
  absl::StatusOr<uint32_t> dim = TableDim(*context.client, table);
  if (!dim.ok()) return ClusterError(dim.status());
  std::vector<float> rows(keys->size() * *dim);
  const absl::Status status =
      context.client->Pull(table, *keys, absl::MakeSpan(rows));
  if (!status.ok()) return ClusterError(status);
  if (!context.json) {
    for (size_t i = 0; i < keys->size(); ++i) {
      std::string line = absl::StrCat((*keys)[i], "\t");
      for (uint32_t d = 0; d < *dim; ++d) {
        absl::StrAppend(&line, d == 0 ? "" : " ", rows[i * *dim + d]);
      }
      PrintLine(line);
    }
    return kExitOk;
  }
  JsonWriter json;
  json.BeginObject();
  json.Key("table").String(table);
  json.Key("dim").Uint(*dim);
  json.Key("rows").BeginArray();
  for (size_t i = 0; i < keys->size(); ++i) {
    json.BeginObject().Key("key").Uint((*keys)[i]);
    json.Key("values").BeginArray();
    for (uint32_t d = 0; d < *dim; ++d) json.Float(rows[i * *dim + d]);
    json.EndArray().EndObject();
  }
  json.EndArray().EndObject();
  PrintLine(json.text());
  return kExitOk;
}

int PushCommand(const CommandContext& context) {
  const std::string& table = context.args[0];
  const std::string path = absl::GetFlag(FLAGS_file);
  const std::string gradient_text = absl::GetFlag(FLAGS_gradients);
  absl::StatusOr<std::vector<uint64_t>> keys = KeysFromArgs(context);
  if (!keys.ok()) return UsageError(keys.status().message());
  if (path.empty() == (keys->empty() && gradient_text.empty())) {
    return UsageError(
        "usage: stratactl push TABLE --keys=K,.. --gradients=G,.. | "
        "--file=PATH (one or the other)");
  }
  if (path.empty() && (keys->empty() || gradient_text.empty())) {
    return UsageError("push needs both --keys and --gradients");
  }
  absl::StatusOr<uint32_t> dim = TableDim(*context.client, table);
  if (!dim.ok()) return ClusterError(dim.status());
  std::vector<float> gradients;
  if (!path.empty()) {
    const absl::Status read = ReadGradientFile(path, *dim, *keys, gradients);
    if (!read.ok()) return UsageError(read.message());
    if (keys->empty()) return UsageError(absl::StrCat(path, ": no rows"));
  } else {
    for (const std::string& piece : SplitList(gradient_text)) {
      const absl::Status parsed = ParseGradient(piece, gradients);
      if (!parsed.ok()) return UsageError(parsed.message());
    }
    if (gradients.size() != keys->size() * *dim) {
      return UsageError(absl::StrCat("--gradients holds ", gradients.size(),
                                     " numbers; ", keys->size(),
                                     " keys of table '", table, "' (dim ", *dim,
                                     ") need ", keys->size() * *dim));
    }
  }
  const absl::Status status = context.client->Push(table, *keys, gradients);
  if (!status.ok()) return ClusterError(status);
  if (context.json) {
    JsonWriter json;
    json.BeginObject();
    json.Key("table").String(table);
    json.Key("dim").Uint(*dim);
    json.Key("keys").Uint(keys->size());
    json.EndObject();
    PrintLine(json.text());
  } else {
    PrintLine(absl::StrCat("pushed ", keys->size(), " keys to table '", table,
                           "' (dim ", *dim, ")"));
  }
  return kExitOk;
}

}  // namespace tools_internal
}  // namespace strata
