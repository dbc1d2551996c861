#ifndef STRATA_WORKER_TENSORFLOW_CLIENT_LIBRARY_H_
#define STRATA_WORKER_TENSORFLOW_CLIENT_LIBRARY_H_

// Part of the TF op library: compiled against TensorFlow's headers, so
// absl:: here is TensorFlow's copy of Abseil, never Debian's.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/tensorflow/strata_tf_client.h"

namespace strata {

// libstrata_tf_client.so (strata_tf_client.h), loaded with
// dlmopen(LM_ID_NEWLM) into a link namespace of its own: its libgrpc++,
// libprotobuf and libabsl dependencies are loaded there too and resolve only
// against each other, never against the protobuf and Abseil that
// libtensorflow_framework exports into the process's global scope. The op
// library calls it only through the function pointers below (from dlsym).
//
// The namespace has a libc of its own. Two libcs in one process share each
// thread's descriptor but not their pthread key tables, so before the
// library is loaded the key numbers are split between them (see
// PartitionPthreadKeys in the .cc); for a moment while that happens,
// pthread_key_create fails elsewhere in the process. Thread-specific data
// the namespace's code attaches to a thread the process made (Abseil's
// per-thread state, our last error) is not reclaimed when that thread
// exits: each libc runs only its own key destructors. TensorFlow's thread
// pools live as long as the process, so this does not add up.
//
// The file is STRATA_TF_CLIENT_LIBRARY when set, else libstrata_tf_client.so
// in the directory of the op library itself. Loaded once per process and
// never unloaded. Thread-safe (immutable once loaded).
class ClientLibrary {
 public:
  // The library, loaded on the first call. FAILED_PRECONDITION naming the
  // file and dlerror() when it cannot be loaded or is another ABI version;
  // every later call returns the same answer.
  static absl::StatusOr<const ClientLibrary*> Get();

  ClientLibrary(const ClientLibrary&) = delete;
  ClientLibrary& operator=(const ClientLibrary&) = delete;

  const std::string& path() const { return path_; }

  // OK for code 0; otherwise that code with "<context>: <the library's
  // last error message on this thread>". REQUIRES: called on the thread
  // that made the call returning `code`, before its next call.
  absl::Status ToStatus(int code, absl::string_view context) const;

  decltype(&strata_tf_client_create) client_create = nullptr;
  decltype(&strata_tf_client_destroy) client_destroy = nullptr;
  decltype(&strata_tf_create_table) create_table = nullptr;
  decltype(&strata_tf_pull) pull = nullptr;
  decltype(&strata_tf_push) push = nullptr;
  decltype(&strata_tf_last_error_message) last_error_message = nullptr;

 private:
  explicit ClientLibrary(std::string path) : path_(std::move(path)) {}
  static absl::StatusOr<const ClientLibrary*> Load();

  std::string path_;
};

}  // namespace strata

#endif  // STRATA_WORKER_TENSORFLOW_CLIENT_LIBRARY_H_
