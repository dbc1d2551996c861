#include "worker/data/criteo_reader.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace strata {
namespace {

// The first few malformed lines are logged one by one; after that only when
// the count reaches a power of two, so a bad file cannot flood the log.
constexpr int64_t kMalformedLoggedInFull = 5;

bool IsPowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

absl::Status FileError(int error, const std::string& what,
                       const std::string& path) {
  const std::string message =
      absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EIO:
      return absl::DataLossError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace

void Batch::Clear() {
  labels.clear();
  dense.clear();
  keys.clear();
  field_offsets.clear();
}

void Batch::Append(const CriteoExample& example) {
  if (field_offsets.empty()) field_offsets.push_back(0);
  const uint32_t base = static_cast<uint32_t>(keys.size());
  labels.push_back(example.label);
  dense.insert(dense.end(), example.dense, example.dense + kCriteoNumDense);
  keys.insert(keys.end(), example.keys.begin(), example.keys.end());
  for (uint32_t end : example.ends) field_offsets.push_back(base + end);
}

void Batch::AppendRange(const Batch& other, size_t begin, size_t end) {
  if (begin >= end) return;
  if (field_offsets.empty()) field_offsets.push_back(0);
  labels.insert(labels.end(), other.labels.begin() + begin,
                other.labels.begin() + end);
  dense.insert(dense.end(), other.dense.begin() + begin * kCriteoNumDense,
               other.dense.begin() + end * kCriteoNumDense);
  const uint32_t first = other.field_offsets[begin * kCriteoNumCategorical];
  const uint32_t last = other.field_offsets[end * kCriteoNumCategorical];
  const uint32_t base = static_cast<uint32_t>(keys.size());
  keys.insert(keys.end(), other.keys.begin() + first,
              other.keys.begin() + last);
  for (size_t i = begin * kCriteoNumCategorical + 1;
       i <= end * kCriteoNumCategorical; ++i) {
    field_offsets.push_back(base + other.field_offsets[i] - first);
  }
}

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(
    CriteoReaderOptions options) {
  if (options.files.empty()) {
    return absl::InvalidArgumentError("no input files");
  }
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size ", options.batch_size, " is not positive"));
  }
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", options.rank, " is outside 0..", options.world_size - 1,
        " (world_size ", options.world_size, ")"));
  }
  std::unique_ptr<CriteoReader> reader(new CriteoReader(std::move(options)));
  const CriteoReaderOptions& o = reader->options_;
  for (size_t i = 0; i < o.files.size(); ++i) {
    if (o.shard_by == CriteoReaderOptions::ShardBy::kLines ||
        static_cast<int>(i % o.world_size) == o.rank) {
      reader->my_files_.push_back(i);
    }
  }
  if (reader->my_files_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", o.rank, " of ", o.world_size, " gets none of the ",
        o.files.size(), " files when sharding by file; shard by line instead"));
  }
  // Fail early, with the file's name, rather than at the first batch.
  for (size_t index : reader->my_files_) {
    std::FILE* f = std::fopen(o.files[index].c_str(), "rb");
    if (f == nullptr) return FileError(errno, "open", o.files[index]);
    std::fclose(f);
  }
  return reader;
}

CriteoReader::CriteoReader(CriteoReaderOptions options)
    : options_(std::move(options)) {}

CriteoReader::~CriteoReader() {
  if (file_ != nullptr) std::fclose(file_);
  std::free(line_buffer_);
}

bool CriteoReader::OwnsLine() const {
  if (options_.shard_by == CriteoReaderOptions::ShardBy::kFiles) return true;
  return global_line_ % options_.world_size == options_.rank;
}

absl::Status CriteoReader::OpenNextFile() {
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
  const std::string& path = options_.files[my_files_[next_file_++]];
  file_ = std::fopen(path.c_str(), "rb");
  if (file_ == nullptr) return FileError(errno, "open", path);
  file_name_ = &path;
  line_in_file_ = 0;
  return absl::OkStatus();
}

// Reads the next line of this rank's files into line_buffer_ (without '\n'),
// or sets *eof at the end of the last file.
absl::Status CriteoReader::ReadLine(bool* eof) {
  *eof = false;
  while (true) {
    if (file_ == nullptr) {
      if (next_file_ >= my_files_.size()) {
        *eof = true;
        return absl::OkStatus();
      }
      STRATA_RETURN_IF_ERROR(OpenNextFile());
    }
    errno = 0;
    line_length_ = getline(&line_buffer_, &line_capacity_, file_);
    if (line_length_ >= 0) break;
    if (std::ferror(file_)) {
      return FileError(errno != 0 ? errno : EIO, "read", *file_name_);
    }
    std::fclose(file_);
    file_ = nullptr;
  }
  if (line_length_ > 0 && line_buffer_[line_length_ - 1] == '\n') {
    --line_length_;
  }
  ++line_in_file_;
  ++global_line_;
  return absl::OkStatus();
}

absl::Status CriteoReader::HandleMalformed(CriteoLineError kind,
                                           const absl::Status& error) {
  const std::string where = absl::StrCat(*file_name_, ":", line_in_file_);
  if (options_.strict) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed line ", where, ": ", error.message(),
                     " (strict mode stops at the first malformed line)"));
  }
  ++stats_.malformed;
  ++stats_.malformed_by_kind[static_cast<int>(kind)];
  if (stats_.malformed <= kMalformedLoggedInFull ||
      IsPowerOfTwo(stats_.malformed)) {
    STRATA_LOG(WARNING, "data")
        << "skipped malformed line " << where << ": " << error.message() << " ("
        << stats_.malformed << " malformed lines so far"
        << (stats_.malformed > kMalformedLoggedInFull
                ? "; logging only at powers of two)"
                : ")");
  }
  return absl::OkStatus();
}

absl::Status CriteoReader::ReadBatch(Batch* batch) {
  batch->Clear();
  CriteoExample example;
  while (!epoch_done_ &&
         static_cast<int>(batch->size()) < options_.batch_size) {
    bool eof = false;
    STRATA_RETURN_IF_ERROR(ReadLine(&eof));
    if (eof) {
      epoch_done_ = true;
      break;
    }
    if (!OwnsLine()) continue;
    ++stats_.lines;
    CriteoLineError kind = CriteoLineError::kNone;
    const absl::Status parsed = ParseCriteoLine(
        absl::string_view(line_buffer_, line_length_), &example, &kind);
    if (!parsed.ok()) {
      STRATA_RETURN_IF_ERROR(HandleMalformed(kind, parsed));
      continue;
    }
    ++stats_.examples;
    batch->Append(example);
  }
  return absl::OkStatus();
}

absl::Status CriteoReader::StartNextEpoch() {
  if (file_ != nullptr) {
    std::fclose(file_);
    file_ = nullptr;
  }
  next_file_ = 0;
  global_line_ = -1;
  epoch_done_ = false;
  ++epoch_;
  return absl::OkStatus();
}

absl::StatusOr<Batch> ReadAllCriteoExamples(CriteoReaderOptions options) {
  options.batch_size = 1 << 16;
  STRATA_ASSIGN_OR_RETURN(auto reader, CriteoReader::Open(std::move(options)));
  Batch all;
  Batch batch;
  while (true) {
    STRATA_RETURN_IF_ERROR(reader->ReadBatch(&batch));
    if (batch.size() == 0) return all;
    all.AppendRange(batch, 0, batch.size());
  }
}

absl::StatusOr<int64_t> CountCriteoLines(const std::vector<std::string>& files,
                                         int64_t limit) {
  int64_t lines = 0;
  std::vector<char> buffer(1 << 16);
  for (const std::string& path : files) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    }
    bool line_open = false;  // bytes seen since the last newline
    size_t read;
    while (lines < limit &&
           (read = std::fread(buffer.data(), 1, buffer.size(), file)) > 0) {
      for (size_t i = 0; i < read; ++i) {
        if (buffer[i] == '\n') {
          lines += line_open ? 1 : 0;
          line_open = false;
        } else {
          line_open = true;
        }
      }
    }
    const bool failed = std::ferror(file) != 0;
    std::fclose(file);
    if (failed) return absl::DataLossError(absl::StrCat("cannot read ", path));
    lines += line_open ? 1 : 0;  // a last line without a newline
    if (lines >= limit) return limit;
  }
  return lines;
}

}  // namespace strata
