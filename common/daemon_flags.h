#ifndef STRATA_COMMON_DAEMON_FLAGS_H_
#define STRATA_COMMON_DAEMON_FLAGS_H_

// The flags every Strata daemon (strata-server, strata-serving) has, defined
// once so that they mean the same everywhere.

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, host);
ABSL_DECLARE_FLAG(std::string, port_file);
ABSL_DECLARE_FLAG(int, metrics_port);
ABSL_DECLARE_FLAG(std::string, log_level);
ABSL_DECLARE_FLAG(std::string, tls_cert_file);
ABSL_DECLARE_FLAG(std::string, tls_key_file);
ABSL_DECLARE_FLAG(std::string, tls_client_ca_file);
ABSL_DECLARE_FLAG(std::string, auth_token_file);
ABSL_DECLARE_FLAG(int, request_threads);
ABSL_DECLARE_FLAG(int64_t, max_queued_requests);
ABSL_DECLARE_FLAG(double, max_queue_wait_ms);

#endif  // STRATA_COMMON_DAEMON_FLAGS_H_
