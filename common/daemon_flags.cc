#include "common/daemon_flags.h"

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to listen on. The default accepts local clients only.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the bound gRPC port is written to this file once serving.");
ABSL_FLAG(int, metrics_port, -1,
          "HTTP port for /healthz and Prometheus /metrics; -1 disables, 0 "
          "picks a free one.");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain of this server; with --tls_key_file turns on "
          "TLS on the gRPC port.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "If set, clients must present a certificate signed by this PEM CA.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the bearer token that protected calls must carry "
          "(training shards: CreateTable, Push, Checkpoint, Restore, "
          "Subscribe; serving: Lookup and Status with --auth_reads); empty "
          "leaves them open.");
ABSL_FLAG(int, request_threads, 0,
          "Threads serving the data path (strata-server: Pull and Push; "
          "strata-serving: Lookup); 0: one per core this process may run "
          "on (its CPU affinity).");
ABSL_FLAG(int64_t, max_queued_requests, 64,
          "Data path requests waiting for a thread; past it one is refused "
          "at once with RESOURCE_EXHAUSTED (clients retry with backoff), and "
          "one whose deadline passed while it waited is dropped unprocessed.");
ABSL_FLAG(double, max_queue_wait_ms, 0,
          "While the oldest waiting data path request has waited longer than "
          "this, new ones are refused at once with RESOURCE_EXHAUSTED: a "
          "bound on queueing delay that follows the requests' cost. 0: off.");
