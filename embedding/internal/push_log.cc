#include "embedding/internal/push_log.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/crc32c.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace strata {
namespace embedding_internal {
namespace {

constexpr char kSegmentPrefix[] = "segment-";
constexpr char kSegmentSuffix[] = ".log";
// Payload: table count, client id length, client sequence, replication
// term and sequence; then the client id; then per table a 16-byte header
// (table id, dim, state dim, key count), its keys and its rows. Integers
// and floats in the machine's byte order, as the store's other records.
constexpr size_t kFixedBytes = 2 * sizeof(uint32_t) + 3 * sizeof(uint64_t);
// Far above any table's row width (limits in table_config.h), low enough
// that a width times a key count cannot overflow.
constexpr uint64_t kMaxRowFloats = uint64_t{1} << 24;

// Keys and rows start 8-byte aligned in the payload (read in place at
// replay): the client id and each table's rows are padded with zeros.
constexpr uint64_t PaddedTo8(uint64_t bytes) { return (bytes + 7) / 8 * 8; }
constexpr char kZeros[8] = {};

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
bool Take(absl::string_view& in, T* value) {
  if (in.size() < sizeof(T)) return false;
  std::memcpy(value, in.data(), sizeof(T));
  in.remove_prefix(sizeof(T));
  return true;
}

absl::Status FileError(const rocksdb::Status& s, absl::string_view what,
                       const std::string& path) {
  const std::string message =
      absl::StrCat(what, " ", path, " failed: ", s.ToString());
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the disk is full: ", message));
  }
  return absl::InternalError(message);
}

// Parses one payload into `record` (spans into `payload`, which must be
// aligned for floats and keys: the replay's buffer is).
absl::Status ParsePayload(absl::string_view payload, PushLogRecord* record) {
  const auto corrupt = [](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("push log record: ", what));
  };
  uint32_t num_tables = 0, id_bytes = 0;
  if (!Take(payload, &num_tables) || !Take(payload, &id_bytes) ||
      !Take(payload, &record->client_sequence) ||
      !Take(payload, &record->replication.term) ||
      !Take(payload, &record->replication.sequence)) {
    return corrupt("shorter than its fixed fields");
  }
  if (payload.size() < PaddedTo8(id_bytes)) {
    return corrupt("client id past its end");
  }
  record->client_id.assign(payload.data(), id_bytes);
  payload.remove_prefix(PaddedTo8(id_bytes));
  record->tables.clear();
  for (uint32_t t = 0; t < num_tables; ++t) {
    PushLogRows rows;
    uint32_t count = 0;
    if (!Take(payload, &rows.table) || !Take(payload, &rows.dim) ||
        !Take(payload, &rows.state_dim) || !Take(payload, &count)) {
      return corrupt("table header past its end");
    }
    const uint64_t width = uint64_t{rows.dim} + rows.state_dim;
    if (rows.dim == 0 || width > kMaxRowFloats) {
      return corrupt(absl::StrCat("row width ", width));
    }
    const uint64_t key_bytes = uint64_t{count} * sizeof(FeatureId);
    const uint64_t row_bytes = PaddedTo8(uint64_t{count} * width * 4);
    if (payload.size() < key_bytes + row_bytes) {
      return corrupt(absl::StrCat(count, " rows past its end"));
    }
    rows.keys = absl::MakeConstSpan(
        reinterpret_cast<const FeatureId*>(payload.data()), count);
    rows.rows = reinterpret_cast<const float*>(payload.data() + key_bytes);
    payload.remove_prefix(key_bytes + row_bytes);
    record->tables.push_back(rows);
  }
  if (!payload.empty()) {
    return corrupt(absl::StrCat(payload.size(), " bytes past its tables"));
  }
  return absl::OkStatus();
}

// The path of segment `number` in `dir`.
std::string SegmentPath(const std::string& dir, uint64_t number) {
  char name[48];
  std::snprintf(name, sizeof(name), "%s%020" PRIu64 "%s", kSegmentPrefix,
                number, kSegmentSuffix);
  return absl::StrCat(dir, "/", name);
}

}  // namespace

PushLog::PushLog(rocksdb::Env* env, std::string dir)
    : env_(env), dir_(std::move(dir)) {}

PushLog::~PushLog() {
  absl::MutexLock lock(&mu_);
  if (file_ != nullptr) file_->Close().PermitUncheckedError();
}

absl::StatusOr<std::vector<uint64_t>> PushLog::ListSegments(
    rocksdb::Env* env, const std::string& dir) {
  std::vector<std::string> names;
  rocksdb::Status s = env->GetChildren(dir, &names);
  if (s.IsNotFound()) return std::vector<uint64_t>();
  if (!s.ok()) return FileError(s, "listing", dir);
  std::vector<uint64_t> numbers;
  for (absl::string_view name : names) {
    uint64_t number = 0;
    if (absl::ConsumePrefix(&name, kSegmentPrefix) &&
        absl::ConsumeSuffix(&name, kSegmentSuffix) &&
        absl::SimpleAtoi(name, &number)) {
      numbers.push_back(number);
    }
  }
  std::sort(numbers.begin(), numbers.end());
  return numbers;
}

absl::Status PushLog::Start() {
  rocksdb::Status s = env_->CreateDirIfMissing(dir_);
  if (!s.ok()) return FileError(s, "creating", dir_);
  STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> numbers,
                          ListSegments(env_, dir_));
  absl::MutexLock lock(&mu_);
  segments_.clear();
  for (uint64_t number : numbers) {
    uint64_t size = 0;
    env_->GetFileSize(SegmentPath(dir_, number), &size).PermitUncheckedError();
    segments_.push_back({number, size});
  }
  next_number_ = numbers.empty() ? 1 : numbers.back() + 1;
  return absl::OkStatus();
}

absl::Status PushLog::OpenSegmentLocked() {
  const uint64_t number = next_number_++;
  rocksdb::EnvOptions options;
  // Preallocated space would be zeros past the last record after a crash.
  options.allow_fallocate = false;
  const std::string path = SegmentPath(dir_, number);
  rocksdb::Status s = env_->NewWritableFile(path, &file_, options);
  if (!s.ok()) {
    file_.reset();
    return FileError(s, "creating", path);
  }
  file_number_ = number;
  segments_.push_back({number, 0});
  return absl::OkStatus();
}

absl::Status PushLog::Append(const PushLogRecord& record) {
  absl::MutexLock lock(&mu_);
  if (file_ == nullptr) STRATA_RETURN_IF_ERROR(OpenSegmentLocked());
  absl::Status written = WriteLocked(record);
  if (!written.ok()) {
    // What the failed write left is a torn record at the segment's end;
    // the next record goes to a new segment.
    file_->Close().PermitUncheckedError();
    file_.reset();
  }
  return written;
}

absl::Status PushLog::WriteLocked(const PushLogRecord& record) {
  const size_t padded_id = PaddedTo8(record.client_id.size());
  std::string head;
  head.reserve(kHeaderBytes + kFixedBytes + padded_id);
  head.resize(kHeaderBytes);
  Put(head, static_cast<uint32_t>(record.tables.size()));
  Put(head, static_cast<uint32_t>(record.client_id.size()));
  Put(head, record.client_sequence);
  Put(head, record.replication.term);
  Put(head, record.replication.sequence);
  head.append(record.client_id);
  head.resize(kHeaderBytes + kFixedBytes + padded_id, '\0');
  // The pieces of the payload, in order, as written.
  std::vector<rocksdb::Slice> pieces;
  std::vector<std::string> table_heads(record.tables.size());
  pieces.emplace_back(head.data() + kHeaderBytes, head.size() - kHeaderBytes);
  for (size_t t = 0; t < record.tables.size(); ++t) {
    const PushLogRows& rows = record.tables[t];
    Put(table_heads[t], rows.table);
    Put(table_heads[t], rows.dim);
    Put(table_heads[t], rows.state_dim);
    Put(table_heads[t], static_cast<uint32_t>(rows.keys.size()));
    pieces.emplace_back(table_heads[t]);
    pieces.emplace_back(reinterpret_cast<const char*>(rows.keys.data()),
                        rows.keys.size() * sizeof(FeatureId));
    const size_t row_bytes =
        rows.keys.size() * (size_t{rows.dim} + rows.state_dim) * sizeof(float);
    pieces.emplace_back(reinterpret_cast<const char*>(rows.rows), row_bytes);
    pieces.emplace_back(kZeros, PaddedTo8(row_bytes) - row_bytes);
  }
  uint64_t length = 0;
  uint32_t crc = 0;
  for (const rocksdb::Slice& piece : pieces) {
    length += piece.size();
    crc = Crc32cExtend(crc, piece.data(), piece.size());
  }
  std::memcpy(head.data(), &kMagic, sizeof(uint32_t));
  std::memcpy(head.data() + 4, &length, sizeof(uint64_t));
  std::memcpy(head.data() + 12, &crc, sizeof(uint32_t));
  const std::string path = SegmentPath(dir_, file_number_);
  rocksdb::Status s = file_->Append(rocksdb::Slice(head));
  for (size_t i = 1; s.ok() && i < pieces.size(); ++i) {
    if (!pieces[i].empty()) s = file_->Append(pieces[i]);
  }
  // The file object may buffer; what it holds must reach the kernel before
  // the push is acknowledged.
  if (s.ok()) s = file_->Flush();
  if (!s.ok()) return FileError(s, "appending to", path);
  segments_.back().bytes += kHeaderBytes + length;
  return absl::OkStatus();
}

uint64_t PushLog::Rotate() {
  absl::MutexLock lock(&mu_);
  if (file_ != nullptr) {
    file_->Close().PermitUncheckedError();
    file_.reset();
  }
  return next_number_;
}

absl::Status PushLog::DeleteBefore(uint64_t segment) {
  absl::MutexLock lock(&mu_);
  while (!segments_.empty() && segments_.front().number < segment) {
    const std::string path = SegmentPath(dir_, segments_.front().number);
    rocksdb::Status s = env_->DeleteFile(path);
    if (!s.ok() && !s.IsNotFound()) return FileError(s, "deleting", path);
    segments_.erase(segments_.begin());
  }
  return absl::OkStatus();
}

uint64_t PushLog::bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (const Segment& segment : segments_) total += segment.bytes;
  return total;
}

bool PushLog::empty() const {
  absl::MutexLock lock(&mu_);
  return segments_.empty();
}

absl::Status PushLog::Replay(rocksdb::Env* env, const std::string& dir,
                             const RecordVisitor& visit) {
  STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> numbers,
                          ListSegments(env, dir));
  // 8-byte words: keys and rows in the payload are read in place.
  std::vector<uint64_t> buffer;
  PushLogRecord record;
  for (uint64_t number : numbers) {
    const std::string path = SegmentPath(dir, number);
    uint64_t size = 0;
    rocksdb::Status s = env->GetFileSize(path, &size);
    std::unique_ptr<rocksdb::SequentialFile> file;
    if (s.ok()) s = env->NewSequentialFile(path, &file, rocksdb::EnvOptions());
    if (!s.ok()) return FileError(s, "opening", path);
    uint64_t offset = 0;
    while (offset < size) {
      const uint64_t left = size - offset;
      const auto torn = [&](absl::string_view why) {
        STRATA_LOG(WARNING, "store")
            << "push log " << path << ": the last " << left
            << " bytes are a record cut short (" << why
            << "), written by a process that died or failed inside the "
               "write; it was never acknowledged and is skipped";
      };
      if (left < kHeaderBytes) {
        torn("a partial header");
        break;
      }
      char header[kHeaderBytes];
      rocksdb::Slice read;
      s = file->Read(kHeaderBytes, &read, header);
      if (!s.ok() || read.size() != kHeaderBytes) {
        return FileError(s, "reading", path);
      }
      uint32_t magic = 0, crc = 0;
      uint64_t length = 0;
      std::memcpy(&magic, read.data(), sizeof(magic));
      std::memcpy(&length, read.data() + 4, sizeof(length));
      std::memcpy(&crc, read.data() + 12, sizeof(crc));
      if (magic != kMagic) {
        return absl::DataLossError(absl::StrCat(
            "push log ", path, ": no record header at offset ", offset));
      }
      if (length > left - kHeaderBytes) {
        torn("its payload is longer than what follows");
        break;
      }
      // At least a word: an empty payload (refused below) still gets a
      // buffer to point at.
      buffer.resize(std::max<uint64_t>(1, (length + 7) / 8));
      char* payload = reinterpret_cast<char*>(buffer.data());
      s = file->Read(length, &read, payload);
      if (!s.ok() || read.size() != length) {
        return FileError(s, "reading", path);
      }
      if (read.data() != payload) std::memmove(payload, read.data(), length);
      offset += kHeaderBytes + length;
      if (Crc32cExtend(0, payload, length) != crc) {
        if (offset == size) {
          torn("its checksum fails");
          break;
        }
        return absl::DataLossError(
            absl::StrCat("push log ", path, ": the record at offset ",
                         offset - kHeaderBytes - length,
                         " fails its checksum, and records follow it"));
      }
      absl::Status parsed =
          ParsePayload(absl::string_view(payload, length), &record);
      if (!parsed.ok()) {
        return absl::Status(parsed.code(),
                            absl::StrCat(path, ": ", parsed.message()));
      }
      STRATA_RETURN_IF_ERROR(visit(record));
    }
  }
  return absl::OkStatus();
}

}  // namespace embedding_internal
}  // namespace strata
