#ifndef STRATA_TENSORFLOW_CLIENT_LIBRARY_H_
#define STRATA_TENSORFLOW_CLIENT_LIBRARY_H_

// Part of the TF op library: compiled against TensorFlow's headers, so
// absl:: here is TensorFlow's copy of Abseil, never Debian's.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tensorflow/strata_tf_client.h"

namespace strata {

// libstrata_tf_client.so (strata_tf_client.h), loaded with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND). Why this cannot crash on any thread
// TensorFlow uses (docs/ARCHITECTURE.md, "TensorFlow op library"):
// - The process keeps one libc, so every thread, whoever made it, has its
//   libc state set up. (The op library used to dlmopen the client into a
//   link namespace of its own, whose second libc had no per-thread state on
//   TensorFlow's threads: gRPC's isalpha() crashed there.)
// - Nothing binds across the boundary in either direction. The client
//   exports only strata_tf_* (version script, hidden visibility), and its
//   gRPC, protobuf and Abseil are Debian's shared libraries: RTLD_LOCAL keeps
//   them out of the global scope TensorFlow resolves in, and RTLD_DEEPBIND
//   makes the client and those libraries resolve their own symbols against
//   each other before the global scope, where libtensorflow_framework
//   exports its own protobuf and Abseil under the same names.
// - Only C types cross, and memory is freed on the side that allocated it.
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
  decltype(&strata_tf_push_async) push_async = nullptr;
  decltype(&strata_tf_wait_for_pushes) wait_for_pushes = nullptr;
  decltype(&strata_tf_serving_client_create) serving_client_create = nullptr;
  decltype(&strata_tf_serving_lookup) serving_lookup = nullptr;
  decltype(&strata_tf_last_error_message) last_error_message = nullptr;

 private:
  explicit ClientLibrary(std::string path) : path_(std::move(path)) {}
  static absl::StatusOr<const ClientLibrary*> Load();

  std::string path_;
};

}  // namespace strata

#endif  // STRATA_TENSORFLOW_CLIENT_LIBRARY_H_
