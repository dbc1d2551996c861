#include "worker/training/dense_checkpoint.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/file_system.h"
#include "common/hash.h"

namespace strata {
namespace {

constexpr absl::string_view kMagic = "STRATA-DENSE-1\n";

void AppendU64(uint64_t value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void AppendBytes(absl::string_view bytes, std::string* out) {
  AppendU64(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

// Reads from the front of `in`; false when it is too short.
bool ReadU64(absl::string_view* in, uint64_t* value) {
  if (in->size() < sizeof(*value)) return false;
  std::memcpy(value, in->data(), sizeof(*value));
  in->remove_prefix(sizeof(*value));
  return true;
}

bool ReadBytes(absl::string_view* in, absl::string_view* bytes) {
  uint64_t size;
  if (!ReadU64(in, &size) || in->size() < size) return false;
  *bytes = in->substr(0, size);
  in->remove_prefix(size);
  return true;
}

std::string FileName(int64_t step) {
  return absl::StrCat("dense-", step, ".ckpt");
}

}  // namespace

absl::Status WriteDenseCheckpoint(FileSystem* fs, absl::string_view dir,
                                  const DenseCheckpoint& checkpoint) {
  std::string body;
  AppendU64(static_cast<uint64_t>(checkpoint.global_step), &body);
  AppendU64(static_cast<uint64_t>(checkpoint.epoch), &body);
  AppendU64(static_cast<uint64_t>(checkpoint.batches_in_epoch), &body);
  AppendBytes(checkpoint.ps_checkpoint_id, &body);
  AppendBytes(checkpoint.model_description, &body);
  AppendBytes(absl::string_view(
                  reinterpret_cast<const char*>(checkpoint.parameters.data()),
                  checkpoint.parameters.size() * sizeof(float)),
              &body);
  AppendBytes(checkpoint.optimizer_state, &body);
  std::string file(kMagic);
  AppendU64(HashString(body), &file);
  file += body;
  if (absl::Status s = fs->CreateDirs(dir); !s.ok()) return s;
  const std::string name = FileName(checkpoint.global_step);
  if (absl::Status s =
          fs->WriteFileAtomically(absl::StrCat(dir, "/", name), file);
      !s.ok()) {
    return s;
  }
  return fs->WriteFileAtomically(absl::StrCat(dir, "/LATEST"),
                                 absl::StrCat(name, "\n"));
}

absl::StatusOr<DenseCheckpoint> ReadLatestDenseCheckpoint(
    FileSystem* fs, absl::string_view dir) {
  const std::string latest_path = absl::StrCat(dir, "/LATEST");
  if (!fs->Exists(latest_path)) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir, " (",
                                            latest_path, " does not exist)"));
  }
  auto latest = fs->ReadFile(latest_path);
  if (!latest.ok()) return latest.status();
  const std::string path =
      absl::StrCat(dir, "/", absl::StripSuffix(*latest, "\n"));
  auto file = fs->ReadFile(path);
  if (!file.ok()) return file.status();
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("dense checkpoint ", path, " is corrupt: ", why));
  };
  absl::string_view in = *file;
  if (!absl::ConsumePrefix(&in, kMagic)) return corrupt("bad magic");
  uint64_t checksum;
  if (!ReadU64(&in, &checksum)) return corrupt("truncated");
  if (HashString(in) != checksum) return corrupt("checksum mismatch");
  DenseCheckpoint checkpoint;
  uint64_t step, epoch, batches;
  absl::string_view id, description, parameters, state;
  if (!ReadU64(&in, &step) || !ReadU64(&in, &epoch) ||
      !ReadU64(&in, &batches) || !ReadBytes(&in, &id) ||
      !ReadBytes(&in, &description) || !ReadBytes(&in, &parameters) ||
      !ReadBytes(&in, &state) || !in.empty() ||
      parameters.size() % sizeof(float) != 0) {
    return corrupt("bad layout");
  }
  checkpoint.global_step = static_cast<int64_t>(step);
  checkpoint.epoch = static_cast<int>(epoch);
  checkpoint.batches_in_epoch = static_cast<int64_t>(batches);
  checkpoint.ps_checkpoint_id = std::string(id);
  checkpoint.model_description = std::string(description);
  checkpoint.parameters.resize(parameters.size() / sizeof(float));
  std::memcpy(checkpoint.parameters.data(), parameters.data(),
              parameters.size());
  checkpoint.optimizer_state = std::string(state);
  return checkpoint;
}

}  // namespace strata
