#include "worker/tensorflow/client_library.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

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

// pthread keys the namespace's libc may hand out (gRPC, Abseil and
// protobuf use a few).
constexpr size_t kNamespaceKeys = 128;

using KeyCreate = int (*)(pthread_key_t*, void (*)(void*));
using KeyDelete = int (*)(pthread_key_t);

// A namespace has its own libc, and each libc numbers pthread keys from 0
// in a table of its own, while the values live in the thread descriptor the
// two share: left alone, the namespace's first key is the process's key 0
// (CPython's GIL state, say) and each side overwrites the other's value.
// So the keys are split: the process's libc keeps all but the highest
// kNamespaceKeys of its free keys, which it holds reserved (never used);
// the namespace's libc takes every key except exactly those, so that its
// later pthread_key_create calls return only them.
void PartitionPthreadKeys(KeyCreate namespace_create,
                          KeyDelete namespace_delete) {
  std::vector<pthread_key_t> free_here;
  pthread_key_t key;
  while (pthread_key_create(&key, nullptr) == 0) free_here.push_back(key);
  std::sort(free_here.begin(), free_here.end());
  const size_t reserved = std::min(kNamespaceKeys, free_here.size() / 2);
  const auto first_reserved = free_here.end() - reserved;
  for (auto it = free_here.begin(); it != first_reserved; ++it) {
    pthread_key_delete(*it);
  }
  const std::unordered_set<pthread_key_t> for_namespace(first_reserved,
                                                        free_here.end());
  std::vector<pthread_key_t> taken;
  while (namespace_create(&key, nullptr) == 0) taken.push_back(key);
  for (pthread_key_t k : taken) {
    if (for_namespace.count(k) > 0) namespace_delete(k);
  }
}

// A new link namespace holding only libc so far, its pthread keys kept
// apart from the process's.
absl::StatusOr<Lmid_t> NewNamespace() {
  void* libc = dlmopen(LM_ID_NEWLM, "libc.so.6", RTLD_NOW | RTLD_LOCAL);
  if (libc == nullptr) {
    return absl::FailedPreconditionError(
        "cannot make a link namespace (dlmopen of libc.so.6): " + DlError());
  }
  Lmid_t lmid = LM_ID_BASE;
  if (dlinfo(libc, RTLD_DI_LMID, &lmid) != 0) {
    return absl::FailedPreconditionError("dlinfo(RTLD_DI_LMID): " + DlError());
  }
  auto create = reinterpret_cast<KeyCreate>(dlsym(libc, "pthread_key_create"));
  auto destroy = reinterpret_cast<KeyDelete>(dlsym(libc, "pthread_key_delete"));
  if (create == nullptr || destroy == nullptr) {
    return absl::FailedPreconditionError(
        "libc.so.6 in the new namespace lacks pthread_key_create");
  }
  // A libc shared by the namespaces has one key table: nothing to split.
  if (create != &pthread_key_create) PartitionPthreadKeys(create, destroy);
  return lmid;
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
  // (a link namespace cannot be torn down while TF kernels may call in).
  static const auto* const loaded =
      new absl::StatusOr<const ClientLibrary*>(Load());
  return *loaded;
}

absl::StatusOr<const ClientLibrary*> ClientLibrary::Load() {
  std::unique_ptr<ClientLibrary> library(new ClientLibrary(LibraryPath()));
  const std::string& path = library->path_;
  // A fresh namespace, so the library's DT_NEEDED (Debian's gRPC, protobuf,
  // Abseil, and a libc/libstdc++ of the namespace's own) are resolved there.
  // RTLD_LOCAL is the only mode dlmopen allows.
  absl::StatusOr<Lmid_t> lmid = NewNamespace();
  if (!lmid.ok()) return lmid.status();
  void* handle = dlmopen(*lmid, path.c_str(), RTLD_NOW | RTLD_LOCAL);
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
