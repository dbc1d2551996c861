#include "worker/training/tensorboard_events.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"

namespace strata {
namespace {

// Field numbers of tensorflow.Event (core/util/event.proto) and of
// tensorflow.Summary and Summary.Value (core/framework/summary.proto).
constexpr int kEventWallTime = 1;     // double
constexpr int kEventStep = 2;         // int64
constexpr int kEventFileVersion = 3;  // string
constexpr int kEventSummary = 5;      // Summary
constexpr int kSummaryValue = 1;      // repeated Summary.Value
constexpr int kValueTag = 1;          // string
constexpr int kValueSimpleValue = 2;  // float

// Protocol buffer wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void PutVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void PutKey(int field, int wire_type, std::string* out) {
  PutVarint((static_cast<uint64_t>(field) << 3) | wire_type, out);
}

template <typename T>
void PutLittleEndian(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and ARM64: little-endian
  out->append(bytes, sizeof(T));
}

void PutBytes(int field, absl::string_view bytes, std::string* out) {
  PutKey(field, kLengthDelimited, out);
  PutVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

std::string EventHead(int64_t step, double wall_time) {
  std::string event;
  PutKey(kEventWallTime, kFixed64, &event);
  PutLittleEndian(wall_time, &event);
  PutKey(kEventStep, kVarint, &event);
  PutVarint(static_cast<uint64_t>(step), &event);
  return event;
}

}  // namespace

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string ScalarEvent(
    int64_t step, double wall_time,
    const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string entry;
    PutBytes(kValueTag, tag, &entry);
    PutKey(kValueSimpleValue, kFixed32, &entry);
    PutLittleEndian(value, &entry);
    PutBytes(kSummaryValue, entry, &summary);
  }
  std::string event = EventHead(step, wall_time);
  PutBytes(kEventSummary, summary, &event);
  return event;
}

std::string TfRecordFrame(absl::string_view record) {
  std::string frame;
  std::string length;
  PutLittleEndian(static_cast<uint64_t>(record.size()), &length);
  frame += length;
  PutLittleEndian(MaskedCrc32c(length), &frame);
  frame.append(record.data(), record.size());
  PutLittleEndian(MaskedCrc32c(record), &frame);
  return frame;
}

absl::StatusOr<std::unique_ptr<TensorBoardEvents>> TensorBoardEvents::Open(
    const std::string& dir, double wall_time) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot create --tensorboard_dir ", dir, ": ", error.message()));
  }
  const std::string path = absl::StrCat(
      dir, "/events.out.tfevents.", static_cast<int64_t>(std::floor(wall_time)),
      ".", "strata-worker.", ::getpid());
  std::FILE* file = std::fopen(path.c_str(), "wbx");
  if (file == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<TensorBoardEvents> events(new TensorBoardEvents(file, path));
  std::string first = EventHead(0, wall_time);
  PutBytes(kEventFileVersion, "brain.Event:2", &first);
  if (absl::Status s = events->WriteRecord(first); !s.ok()) return s;
  return events;
}

TensorBoardEvents::~TensorBoardEvents() { std::fclose(file_); }

absl::Status TensorBoardEvents::AddScalars(
    int64_t step, double wall_time,
    const std::vector<std::pair<std::string, float>>& scalars) {
  return WriteRecord(ScalarEvent(step, wall_time, scalars));
}

absl::Status TensorBoardEvents::WriteRecord(absl::string_view record) {
  const std::string frame = TfRecordFrame(record);
  if (std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size() ||
      std::fflush(file_) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace strata
