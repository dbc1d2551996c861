#ifndef STRATA_EMBEDDING_CHANGE_LOG_H_
#define STRATA_EMBEDDING_CHANGE_LOG_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "embedding/table_config.h"

namespace strata {

// The new values of the rows one update changed, in one table.
struct ChangedRows {
  std::string table;
  uint32_t dim = 0;
  std::vector<FeatureId> keys;
  std::vector<float> values;  // keys.size() * dim
};

// The keys of rows one update deleted (evicted), in one table.
struct DeletedRows {
  std::string table;
  std::vector<FeatureId> keys;
};

// One applied update of a shard: a push (rows of one or more tables), an
// eviction (deleted rows) or the creation of a table.
struct ChangeRecord {
  uint64_t sequence = 0;
  absl::Time acknowledged;
  std::vector<ChangedRows> rows;
  std::vector<DeletedRows> deleted;
  // Set for a table creation.
  std::unique_ptr<EmbeddingTableConfig> created_table;
  // Set by the log before the record is filled: whether anything has read
  // the log in this incarnation (ChangeLog::NoteReader). Until then no
  // follower can need a push's rows, and filling them costs a second pass
  // over every updated row.
  bool followed = true;
  // Set by a filler that left its rows out because the log was not
  // followed. Such a record is not kept: a reader asking for changes from
  // before it is told they are no longer kept, and starts from a snapshot.
  bool rows_left_out = false;

  size_t bytes() const;
};

// The recent updates of a shard, numbered 1, 2, ... within an incarnation,
// kept up to a byte budget so that the change stream can replay them to
// followers. A follower that falls behind what is kept starts over from a
// snapshot, so a slow follower never makes the log grow.
//
// A log made with `hold_until_published` (sync durability) keeps appended
// records from readers until Publish covers them: the store publishes a
// push once the fsync that makes it durable has succeeded, so that no
// follower ever sees an update that a failed fsync may have lost. Otherwise
// a record is published as it is appended. Thread-safe.
class ChangeLog {
 public:
  // Fills the rows of a new record while the log is locked, so that record
  // order and the order in which row values were read agree.
  using Filler = std::function<void(ChangeRecord& record)>;

  ChangeLog(size_t max_bytes, Clock* clock, bool hold_until_published = false);
  ChangeLog(const ChangeLog&) = delete;
  ChangeLog& operator=(const ChangeLog&) = delete;

  // Random, and new after every StartNewIncarnation.
  uint64_t incarnation() const;
  // The latest published record's sequence: what readers see.
  uint64_t latest_sequence() const;
  // The latest appended record's sequence, published or not.
  uint64_t appended_sequence() const;
  // Numbers and stores a record; returns its sequence.
  uint64_t Append(const Filler& fill);
  // Records that something reads the log (a change stream): from now on
  // records are filled with their rows. Stays set for the log's life.
  void NoteReader() const;
  // Makes the records up to `through` (at most the appended ones) visible.
  void Publish(uint64_t through);
  // Forgets every record and draws a new incarnation (the shard's state was
  // replaced, so old sequences mean nothing).
  void StartNewIncarnation();

  // Appends to `out` up to `max_records` published records with sequence >
  // `after`. OUT_OF_RANGE when record after+1 is no longer kept or `after`
  // is past the latest published sequence.
  absl::Status ReadAfter(
      uint64_t after, size_t max_records,
      std::vector<std::shared_ptr<const ChangeRecord>>* out) const;
  // Returns when the latest published sequence passes `after` (true) or at
  // `deadline`.
  bool WaitForChange(uint64_t after, absl::Time deadline) const;

 private:
  const size_t max_bytes_;
  Clock* const clock_;
  const bool hold_until_published_;
  mutable absl::Mutex mu_;
  uint64_t incarnation_ ABSL_GUARDED_BY(mu_);
  // The latest published record; appended_ >= latest_.
  uint64_t latest_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t appended_ ABSL_GUARDED_BY(mu_) = 0;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  mutable bool followed_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::shared_ptr<const ChangeRecord>> records_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata

#endif  // STRATA_EMBEDDING_CHANGE_LOG_H_
