#ifndef STRATA_TENSORFLOW_STRATA_TF_CLIENT_H_
#define STRATA_TENSORFLOW_STRATA_TF_CLIENT_H_

/* The C ABI of libstrata_tf_client.so: a training-PS client (PsClient) behind
 * plain C types, so that a host process whose own gRPC, protobuf and Abseil
 * differ from Strata's (TensorFlow's) can load it with RTLD_LOCAL |
 * RTLD_DEEPBIND and call it only through these functions.
 *
 * Errors. Every function that can fail returns a status code: 0 for OK,
 * otherwise one of the canonical codes of google.rpc.Code (the numbers of
 * absl::StatusCode and grpc::StatusCode), e.g. 3 INVALID_ARGUMENT,
 * 4 DEADLINE_EXCEEDED, 5 NOT_FOUND, 6 ALREADY_EXISTS, 9 FAILED_PRECONDITION,
 * 14 UNAVAILABLE. The message of the last call made on the calling thread
 * (empty after a success) is strata_tf_last_error_message(), as dlerror()
 * works: it stays valid until the thread's next call.
 *
 * Threads. A client is thread-safe: pulls and pushes may run concurrently
 * from any threads. Destroy it once no call is in flight.
 *
 * Memory. The library never frees what the caller passed and the caller
 * never frees what the library returned, except through
 * strata_tf_client_destroy(): nothing allocated on one side of the namespace
 * boundary is released on the other.
 *
 * Example:
 *   StrataTfClientOptions options = {0};
 *   options.shards = "127.0.0.1:50051,127.0.0.1:50052";
 *   options.rpc_timeout_s = 10;
 *   options.retry_deadline_s = 30;
 *   StrataTfClient* client = NULL;
 *   if (strata_tf_client_create(&options, &client) != 0) {
 *     fprintf(stderr, "%s\n", strata_tf_last_error_message());
 *   }
 *   float rows[2 * 16];
 *   uint64_t keys[2] = {7, 42};
 *   strata_tf_pull(client, "user", keys, 2, 16, rows);
 *   strata_tf_client_destroy(client);
 */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a declaration below changes; a loader checks it. */
#define STRATA_TF_CLIENT_ABI_VERSION 3

/* The numbers of strata.v1.OptimizerType and strata.v1.InitializerType. */
#define STRATA_TF_OPTIMIZER_SGD 1
#define STRATA_TF_OPTIMIZER_ADAGRAD 2
#define STRATA_TF_OPTIMIZER_ADAM 3
#define STRATA_TF_OPTIMIZER_FTRL 4
#define STRATA_TF_INITIALIZER_ZEROS 1
#define STRATA_TF_INITIALIZER_CONSTANT 2
#define STRATA_TF_INITIALIZER_UNIFORM 3
#define STRATA_TF_INITIALIZER_TRUNCATED_NORMAL 4

typedef struct StrataTfClient StrataTfClient;

typedef struct StrataTfClientOptions {
  /* host:port of every shard, comma-separated, in shard-index order.
   * Required. */
  const char* shards;
  /* Deadline of each attempt of each call; <= 0: 10 s. */
  double rpc_timeout_s;
  /* How long a call retries shards that answer UNAVAILABLE; < 0: 30 s. */
  double retry_deadline_s;
  /* TLS: a PEM CA to verify the shards against (NULL or "": insecure), and
   * an optional client certificate and key (both or neither). */
  const char* tls_ca_file;
  const char* tls_client_cert_file;
  const char* tls_client_key_file;
  /* File holding a bearer token sent on every call (NULL or "": none). */
  const char* auth_token_file;
  /* Nonzero: rows and gradients travel as IEEE half floats, half the bytes
   * (the shards keep float32 and apply the optimizer in float32); values
   * are rounded to the nearest half. Training PS only. */
  int wire_float16;
} StrataTfClientOptions;

/* strata.v1.TableConfig. A zero number takes the server's default. */
typedef struct StrataTfTableConfig {
  const char* name;
  uint32_t dim;
  uint64_t seed;
  int optimizer; /* STRATA_TF_OPTIMIZER_*; 0: Adagrad */
  float learning_rate;
  float initial_accumulator;    /* Adagrad */
  float epsilon;                /* Adagrad, Adam */
  float beta1, beta2;           /* Adam */
  float ftrl_beta, l1, l2;      /* FTRL */
  int initializer;              /* STRATA_TF_INITIALIZER_*; 0: zeros */
  float init_value;             /* constant */
  float init_min, init_max;     /* uniform */
  float init_mean, init_stddev; /* truncated normal */
} StrataTfTableConfig;

/* STRATA_TF_CLIENT_ABI_VERSION of the library. */
int strata_tf_abi_version(void);

/* Makes a client; on success stores it in *client (destroy it with
 * strata_tf_client_destroy). Does not contact the shards. INVALID_ARGUMENT
 * for a missing or empty shard address; NOT_FOUND / INVALID_ARGUMENT naming
 * an unreadable or empty TLS or token file. */
int strata_tf_client_create(const StrataTfClientOptions* options,
                            StrataTfClient** client);

/* Releases `client` (NULL is a no-op). */
void strata_tf_client_destroy(StrataTfClient* client);

/* Creates the table on every shard. Idempotent for an identical config;
 * ALREADY_EXISTS when the table exists with another one. */
int strata_tf_create_table(StrataTfClient* client,
                           const StrataTfTableConfig* config);

/* Writes the rows of keys[0..num_keys) in order, num_keys * dim floats, to
 * `out`. Unseen keys read as their initial values. num_keys == 0 is a no-op.
 * NOT_FOUND for an unknown table, INVALID_ARGUMENT when `dim` is not the
 * table's dimension, UNAVAILABLE / DEADLINE_EXCEEDED when a shard stays
 * unreachable past the retry deadline. */
int strata_tf_pull(StrataTfClient* client, const char* table,
                   const uint64_t* keys, size_t num_keys, size_t dim,
                   float* out);

/* Applies num_keys * dim gradients (row-major) to the rows of `keys` with
 * the table's optimizer; the gradients of a repeated key are summed first.
 * Errors as strata_tf_pull. */
int strata_tf_push(StrataTfClient* client, const char* table,
                   const uint64_t* keys, size_t num_keys, size_t dim,
                   const float* gradients);

/* strata_tf_push in the background: the keys and gradients are copied and
 * the call returns once the push is queued. The background pushes of one
 * table run one at a time, in the order queued, each retried as
 * strata_tf_push is. At most max_pending (>= 1) of a table are queued or
 * running: beyond that the call waits for room, which bounds how many of
 * this client's own updates a pull may not see yet (its staleness).
 * Returns the error of an earlier background push of the table that
 * failed, if one did, and then queues nothing; each failure is returned
 * once, by one call. The pushes queued when the client is destroyed or the
 * process exits (exit(), not _exit()) are finished first. */
int strata_tf_push_async(StrataTfClient* client, const char* table,
                         const uint64_t* keys, size_t num_keys, size_t dim,
                         const float* gradients, int max_pending);

/* Waits until every background push of the client (of every table) has
 * finished; returns the error of one that failed, if any (once), else 0. */
int strata_tf_wait_for_pushes(StrataTfClient* client);

/* Makes a client of the serving PS (strata-serving) instead: options->shards
 * lists its replicas' host:port, comma-separated (calls go round-robin and
 * move to the next replica on UNAVAILABLE); the other options as for
 * strata_tf_client_create. Only strata_tf_serving_lookup and
 * strata_tf_client_destroy take it. */
int strata_tf_serving_client_create(const StrataTfClientOptions* options,
                                    StrataTfClient** client);

/* Rows of keys[0..num_keys) from the serving PS, num_keys * dim floats into
 * `out`; keys it holds no row for read as zeros. Errors as strata_tf_pull;
 * INVALID_ARGUMENT for a client made by strata_tf_client_create. */
int strata_tf_serving_lookup(StrataTfClient* client, const char* table,
                             const uint64_t* keys, size_t num_keys, size_t dim,
                             float* out);

/* Code and message of the calling thread's last call (0 and "" after a
 * success). The pointer stays valid until the thread's next call. */
int strata_tf_last_error_code(void);
const char* strata_tf_last_error_message(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_TENSORFLOW_STRATA_TF_CLIENT_H_ */
