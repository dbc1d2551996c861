#include "server/replication/replica_sender.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/auth.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "server/replication/position_proto.h"
#include "server/replication/replica_group.h"

namespace strata {
namespace {

constexpr size_t kMaxEntriesPerAppend = 256;
// An Append stops adding entries past this many bytes (it always holds one),
// far below the receiver's message limit (kMaxMessageBytes, 512 MiB): a
// follower behind by many large entries (pushes of many keys, a bucket
// move's blocks of rows) catches up in several calls instead of never.
constexpr size_t kMaxAppendBytes = size_t{64} << 20;
constexpr size_t kCheckpointFileChunkBytes = size_t{1} << 20;
// How long an idle sender waits for entries before it sends a heartbeat.
constexpr absl::Duration kHeartbeat = absl::Milliseconds(200);
constexpr absl::Duration kRetryPause = absl::Milliseconds(200);

void Prepare(grpc::ClientContext& context, absl::Duration timeout,
             const std::string& token) {
  AddBearerToken(token, context);
  context.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)));
}

}  // namespace

ReplicaSender::ReplicaSender(ReplicaGroup* group, uint64_t term,
                             std::string follower_id, std::string address)
    : group_(group),
      term_(term),
      follower_id_(std::move(follower_id)),
      address_(std::move(address)),
      stub_(v1::Replication::NewStub(
          grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()))) {
  thread_ = std::thread([this] { Run(); });
}

ReplicaSender::~ReplicaSender() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

bool ReplicaSender::running() const {
  return !stop_.load() && group_->IsPrimaryOf(term_);
}

void ReplicaSender::Run() {
  std::string last_error;
  while (running()) {
    absl::StatusOr<ReplicationPosition> position = FetchPosition();
    bool needs_snapshot =
        position.ok() && !group_->log().CanContinueFrom(*position);
    absl::Status status = position.status();
    while (status.ok() && running()) {
      if (needs_snapshot) {
        position = SendSnapshot();
        if (!position.ok()) {
          status = position.status();
          break;
        }
      }
      needs_snapshot = false;
      status = Stream(*position, &needs_snapshot);
      if (status.ok() && !needs_snapshot) break;
    }
    if (!status.ok() && status.ToString() != last_error && running()) {
      last_error = status.ToString();
      STRATA_LOG(WARNING, "replication")
          << "cannot replicate to follower " << follower_id_ << " at "
          << address_ << ": " << status.message();
    }
    for (absl::Duration paused; paused < kRetryPause && running();
         paused += absl::Milliseconds(20)) {
      group_->options().clock->SleepFor(absl::Milliseconds(20));
    }
  }
}

absl::StatusOr<ReplicationPosition> ReplicaSender::FetchPosition() {
  grpc::ClientContext context;
  Prepare(context, absl::Seconds(1), group_->options().auth_token);
  v1::GetPositionResponse answer;
  grpc::Status status =
      stub_->GetPosition(&context, v1::GetPositionRequest(), &answer);
  if (!status.ok()) return FromGrpcStatus(status);
  if (answer.highest_term() > term_) {
    group_->ObserveTerm(answer.highest_term());
    return absl::AbortedError("the follower has seen a newer primary");
  }
  return PositionFromProto(answer.position());
}

absl::Status ReplicaSender::Stream(ReplicationPosition position,
                                   bool* needs_snapshot) {
  const ReplicaGroupOptions& options = group_->options();
  while (running()) {
    std::vector<ReplicationEntryPtr> entries =
        group_->log().ReadAfter(position.sequence, kMaxEntriesPerAppend,
                                options.clock->Now() + kHeartbeat);
    if (entries.empty() && !group_->log().CanContinueFrom(position)) {
      *needs_snapshot = true;  // fell behind what the log keeps
      return absl::OkStatus();
    }
    v1::AppendRequest request;
    request.set_shard_index(options.shard_index);
    request.set_term(term_);
    request.set_primary_id(options.replica_id);
    request.set_primary_address(group_->address());
    PositionToProto(position, request.mutable_previous());
    size_t bytes = 0;
    for (const ReplicationEntryPtr& entry : entries) {
      bytes += entry->ByteSizeLong();
      if (request.entries_size() > 0 && bytes > kMaxAppendBytes) break;
      *request.add_entries() = *entry;
    }
    grpc::ClientContext context;
    Prepare(context, options.replication_timeout, group_->options().auth_token);
    v1::AppendResponse answer;
    grpc::Status status = stub_->Append(&context, request, &answer);
    if (!status.ok()) return FromGrpcStatus(status);
    if (answer.highest_term() > term_) {
      group_->ObserveTerm(answer.highest_term());
      return absl::AbortedError("the follower has seen a newer primary");
    }
    if (answer.needs_snapshot()) {
      *needs_snapshot = true;
      return absl::OkStatus();
    }
    position = PositionFromProto(answer.position());
    group_->log().Acknowledge(follower_id_, term_, position.sequence);
  }
  return absl::OkStatus();
}

absl::StatusOr<ReplicationPosition> ReplicaSender::SendSnapshot() {
  const ReplicaGroupOptions& options = group_->options();
  STRATA_ASSIGN_OR_RETURN(auto snapshot,
                          group_->TakeSnapshot(term_, follower_id_));
  const auto& [directory, position] = snapshot;
  namespace fs = std::filesystem;
  const fs::path dir = directory;
  std::vector<fs::path> files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  grpc::ClientContext context;
  Prepare(context, absl::Minutes(30), group_->options().auth_token);
  v1::InstallSnapshotResponse answer;
  auto writer = stub_->InstallSnapshot(&context, &answer);
  v1::SnapshotChunk chunk;
  chunk.set_shard_index(options.shard_index);
  chunk.set_term(term_);
  chunk.set_primary_id(options.replica_id);
  chunk.set_primary_address(group_->address());
  PositionToProto(position, chunk.mutable_position());
  absl::Status read_error =
      error ? absl::InternalError(absl::StrCat("cannot list ", dir.string(),
                                               ": ", error.message()))
            : absl::OkStatus();
  std::string buffer(kCheckpointFileChunkBytes, '\0');
  for (const fs::path& path : files) {
    if (!read_error.ok()) break;
    std::FILE* file = std::fopen(path.c_str(), "rb");
    if (file == nullptr) {
      read_error =
          absl::InternalError(absl::StrCat("cannot open ", path.string()));
      break;
    }
    chunk.set_file(path.filename().string());
    bool sent_any = false;
    while (true) {
      const size_t n = std::fread(buffer.data(), 1, buffer.size(), file);
      if (n == 0 && sent_any) break;
      chunk.set_data(buffer.data(), n);
      sent_any = true;
      if (!writer->Write(chunk)) break;
      if (n < buffer.size()) break;
    }
    std::fclose(file);
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  fs::remove_all(dir, error);
  STRATA_RETURN_IF_ERROR(read_error);
  if (!status.ok()) return FromGrpcStatus(status);
  STRATA_LOG(INFO, "replication")
      << "sent follower " << follower_id_ << " a snapshot at sequence "
      << position.sequence << " of term " << position.term;
  return PositionFromProto(answer.position());
}

}  // namespace strata
