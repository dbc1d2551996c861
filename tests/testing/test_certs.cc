#include "tests/testing/test_certs.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace strata {
namespace testing {
namespace {

constexpr char kNewKey[] =
    "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

absl::Status Shell(const std::string& command) {
  const std::string quiet = absl::StrCat(command, " >/dev/null 2>&1");
  if (std::system(quiet.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("command failed: ", command));
  }
  return absl::OkStatus();
}

// A key and a certificate for `name` signed by the CA in dir/ca.*.
absl::Status MakeSigned(const std::string& dir, const std::string& name,
                        const std::string& extensions) {
  const std::string base = absl::StrCat(dir, "/", name);
  absl::Status status =
      Shell(absl::StrCat("openssl req ", kNewKey, " -keyout ", base,
                         ".key -out ", base, ".csr -subj /CN=", name));
  if (!status.ok()) return status;
  status = WriteTextFile(base + ".ext", extensions);
  if (!status.ok()) return status;
  return Shell(absl::StrCat("openssl x509 -req -in ", base, ".csr -CA ", dir,
                            "/ca.pem -CAkey ", dir, "/ca.key -CAcreateserial",
                            " -days 2 -out ", base, ".pem -extfile ", base,
                            ".ext"));
}

}  // namespace

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  if (!Shell("openssl version").ok()) {
    return absl::FailedPreconditionError("the openssl tool is not installed");
  }
  for (const char* ca : {"ca", "other-ca"}) {
    absl::Status status = Shell(absl::StrCat(
        "openssl req -x509 ", kNewKey, " -days 2 -subj /CN=strata-test-", ca,
        " -keyout ", dir, "/", ca, ".key -out ", dir, "/", ca, ".pem"));
    if (!status.ok()) return status;
  }
  absl::Status status =
      MakeSigned(dir, "server", "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  if (!status.ok()) return status;
  status = MakeSigned(dir, "client", "extendedKeyUsage=clientAuth\n");
  if (!status.ok()) return status;
  TestCerts certs;
  certs.ca_file = dir + "/ca.pem";
  certs.server_cert_file = dir + "/server.pem";
  certs.server_key_file = dir + "/server.key";
  certs.client_cert_file = dir + "/client.pem";
  certs.client_key_file = dir + "/client.key";
  certs.other_ca_file = dir + "/other-ca.pem";
  return certs;
}

}  // namespace testing
}  // namespace strata
