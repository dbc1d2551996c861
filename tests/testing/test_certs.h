#ifndef STRATA_TESTS_TESTING_TEST_CERTS_H_
#define STRATA_TESTS_TESTING_TEST_CERTS_H_

#include <string>

#include "absl/status/statusor.h"

namespace strata {
namespace testing {

// PEM files for TLS tests, made with the `openssl` command line tool: a CA,
// a server certificate it signed (subjectAltName IP:127.0.0.1 and
// DNS:localhost), a client certificate it signed, and a second,
// unrelated CA. Short-lived EC P-256 keys.
struct TestCerts {
  std::string ca_file;
  std::string server_cert_file;
  std::string server_key_file;
  std::string client_cert_file;
  std::string client_key_file;
  std::string other_ca_file;
};

// Writes the files into `dir` (which must exist). FAILED_PRECONDITION when
// `openssl` is missing, INTERNAL when one of its commands fails.
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

// Writes `text` to `path`; INTERNAL when it cannot.
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace testing
}  // namespace strata

#endif  // STRATA_TESTS_TESTING_TEST_CERTS_H_
