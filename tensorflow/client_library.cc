#include "tensorflow/client_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

namespace strata {
namespace {

constexpr char kLibraryName[] = "libstrata_tf_client.so";

// This shared object's own file, found through the address of a function in
// it (the op library is loaded by tf.load_op_library from wherever it lies).
std::string OwnDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&OwnDirectory), &info) == 0 ||
      info.dli_fname == nullptr) {
    return "";
  }
  std::string self = info.dli_fname;
  const size_t slash = self.rfind('/');
  return slash == std::string::npos ? "" : self.substr(0, slash + 1);
}

std::string LibraryPath() {
  const char* path = std::getenv("STRATA_TF_CLIENT_LIBRARY");
  if (path != nullptr && path[0] != '\0') return path;
  return OwnDirectory() + kLibraryName;
}

std::string DlError() {
  const char* error = dlerror();
  return error == nullptr ? "unknown error" : error;
}

template <typename Function>
absl::Status Bind(void* handle, const std::string& path, const char* name,
                  Function* function) {
  dlerror();
  void* symbol = dlsym(handle, name);
  if (symbol == nullptr) {
    return absl::FailedPreconditionError("Strata client library " + path +
                                         " lacks " + name + ": " + DlError());
  }
  *function = reinterpret_cast<Function>(symbol);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<const ClientLibrary*> ClientLibrary::Get() {
  // Loaded once; the library and this answer live as long as the process
  // (never unloaded: TF kernels may call in until the process ends).
  static const auto* const loaded =
      new absl::StatusOr<const ClientLibrary*>(Load());
  return *loaded;
}

absl::StatusOr<const ClientLibrary*> ClientLibrary::Load() {
  std::unique_ptr<ClientLibrary> library(new ClientLibrary(LibraryPath()));
  const std::string& path = library->path_;
  // RTLD_LOCAL: neither the client nor its DT_NEEDED (Debian's gRPC,
  // protobuf, Abseil) join the global scope. RTLD_DEEPBIND: they bind to
  // each other before to the global scope (TensorFlow's protobuf/Abseil).
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (handle == nullptr) {
    return absl::FailedPreconditionError(
        "cannot load the Strata client library " + path + ": " + DlError() +
        " (set STRATA_TF_CLIENT_LIBRARY to its path)");
  }
  decltype(&strata_tf_abi_version) abi_version = nullptr;
  absl::Status bound =
      Bind(handle, path, "strata_tf_abi_version", &abi_version);
  if (bound.ok() && abi_version() != STRATA_TF_CLIENT_ABI_VERSION) {
    bound = absl::FailedPreconditionError(
        "Strata client library " + path + " has ABI version " +
        std::to_string(abi_version()) + ", the op library needs " +
        std::to_string(STRATA_TF_CLIENT_ABI_VERSION) +
        ": build both from the same checkout");
  }
  ClientLibrary& l = *library;
  for (absl::Status s :
       {Bind(handle, path, "strata_tf_client_create", &l.client_create),
        Bind(handle, path, "strata_tf_client_destroy", &l.client_destroy),
        Bind(handle, path, "strata_tf_create_table", &l.create_table),
        Bind(handle, path, "strata_tf_pull", &l.pull),
        Bind(handle, path, "strata_tf_push", &l.push),
        Bind(handle, path, "strata_tf_push_async", &l.push_async),
        Bind(handle, path, "strata_tf_wait_for_pushes", &l.wait_for_pushes),
        Bind(handle, path, "strata_tf_serving_client_create",
             &l.serving_client_create),
        Bind(handle, path, "strata_tf_serving_lookup", &l.serving_lookup),
        Bind(handle, path, "strata_tf_last_error_message",
             &l.last_error_message)}) {
    if (bound.ok()) bound = s;
  }
  if (!bound.ok()) return bound;
  return library.release();
}

absl::Status ClientLibrary::ToStatus(int code,
                                     absl::string_view context) const {
  if (code == 0) return absl::OkStatus();
  // Codes outside google.rpc.Code would be meaningless to TensorFlow.
  const auto status_code = code > 0 && code <= 16
                               ? static_cast<absl::StatusCode>(code)
                               : absl::StatusCode::kUnknown;
  std::string message(context);
  message += ": ";
  message += last_error_message();
  return absl::Status(status_code, message);
}

}  // namespace strata
