#ifndef STRATA_EMBEDDING_ROCKSDB_LOGGER_H_
#define STRATA_EMBEDDING_ROCKSDB_LOGGER_H_

#include <memory>

namespace rocksdb {
class Logger;
}  // namespace rocksdb

namespace strata {

// RocksDB's own messages (its info log), warnings and errors only, as lines
// of the process's log (component "rocksdb"; RocksDB's warnings as INFO,
// its errors as WARNING). Set as Options::info_log of
// every database the process opens.
//
// Why not RocksDB's default, a LOG file next to the data: that file lives
// on the data disk, so a full disk fails its writes too, and RocksDB 7.8's
// file writer then aborts the process on its next line (an assertion, kept
// in Debian's build) instead of refusing the write that hit the full disk.
std::shared_ptr<rocksdb::Logger> RocksDbLogger();

}  // namespace strata

#endif  // STRATA_EMBEDDING_ROCKSDB_LOGGER_H_
