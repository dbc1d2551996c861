// strata-worker: one rank of a data-parallel training job. Pulls embedding
// rows from the training shards, trains the dense DLRM model, allreduces the
// dense gradients with the other ranks (Gloo on CPU, NCCL on GPU) and pushes
// sparse gradients back.

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/ps_client.h"
#include "common/client_flags.h"
#include "common/cluster_flags.h"
#include "common/command_line.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/rate_history.h"
#include "common/system_memory.h"
#include "worker/collective/collective.h"
#include "worker/collective/gloo_collective.h"
#include "worker/collective/rendezvous.h"
#include "worker/model/blas_core.h"
#include "worker/training/status_page.h"
#include "worker/training/trainer.h"
#include "worker/training/training_metrics.h"
#include "worker/worker_options.h"

namespace strata {
namespace {

constexpr int kExitTrainingFailed = 1;

int UsageError(const std::string& message) {
  std::fprintf(stderr, "strata-worker: %s (see --help)\n", message.c_str());
  return kUsageExitCode;
}

// Set for the run again when OPENBLAS_CORETYPE replaced OpenBLAS's own
// choice of kernels: the family it had chosen.
constexpr char kBlasCoreReplacedVariable[] = "STRATA_BLAS_CORE_REPLACED";

void LogBlasKernels() {
  const char* replaced = std::getenv(kBlasCoreReplacedVariable);
  STRATA_LOG(INFO, "worker")
      << "dense math: OpenBLAS's " << BlasCoreName() << " kernels"
      << (replaced == nullptr
              ? std::string()
              : absl::StrCat(" (OPENBLAS_CORETYPE: OpenBLAS took this CPU "
                             "for ",
                             replaced, ", whose kernels lack AVX2)"));
}

absl::StatusOr<std::unique_ptr<Collective>> MakeCollective(
    const WorkerFlags& flags, const ClientSecurity& security) {
  if (flags.num_workers == 1) return CreateLocalCollective();
  RendezvousClientOptions rendezvous_options;
  rendezvous_options.address = flags.rendezvous;
  rendezvous_options.tls_ca_file = security.tls_ca_file;
  rendezvous_options.tls_client_cert_file = security.tls_client_cert_file;
  rendezvous_options.tls_client_key_file = security.tls_client_key_file;
  rendezvous_options.auth_token = security.auth_token;
  auto rendezvous = CreateGrpcRendezvousClient(rendezvous_options);
  if (!rendezvous.ok()) return rendezvous.status();
  if (flags.device == "cuda") {
    return CreateDeviceCollective(flags, rendezvous->get());
  }
  GlooCollectiveOptions options;
  options.rank = flags.rank;
  options.world_size = flags.num_workers;
  options.rendezvous = rendezvous->get();
  options.job_id = flags.job_id;
  options.host = flags.host;
  options.timeout = flags.collective_timeout;
  return CreateGlooCollective(options);
}

int Run(const WorkerFlags& flags) {
  auto security = ClientSecurityFromFlags();
  if (!security.ok()) {
    std::fprintf(stderr, "strata-worker: %s\n",
                 std::string(security.status().message()).c_str());
    return kExitTrainingFailed;
  }

  PsClientOptions ps_options;
  ps_options.shard_addresses = flags.shards;
  ps_options.rpc_timeout = flags.ps_rpc_timeout;
  ps_options.retry_deadline = flags.ps_retry_deadline;
  ps_options.client_id = absl::StrCat(flags.job_id, "/worker-", flags.rank);
  ps_options.tls_ca_file = security->tls_ca_file;
  ps_options.tls_client_cert_file = security->tls_client_cert_file;
  ps_options.tls_client_key_file = security->tls_client_key_file;
  ps_options.auth_token = security->auth_token;
  ps_options.shared_memory_pull.enabled = flags.shared_memory_pull;
  auto ps = PsClient::Create(ps_options);
  auto fail = [&](absl::string_view what, const absl::Status& status) {
    STRATA_LOG(ERROR, "worker")
        << "rank " << flags.rank << ": " << what << ": " << status;
    return kExitTrainingFailed;
  };
  if (!ps.ok()) return fail("PS client", ps.status());
  std::unique_ptr<PsClient> pull_ps;
  if (flags.pull_fp16) {
    ps_options.encoding = WireEncoding::kFloat16;
    ps_options.client_id += "/pulls";
    auto fp16 = PsClient::Create(ps_options);
    if (!fp16.ok()) return fail("PS client of the pulls", fp16.status());
    pull_ps = std::move(*fp16);
  }

  auto model =
      flags.device == "cuda"
          ? CreateCudaDenseModel(flags.trainer.model, flags.cuda_device)
          : CreateCpuDenseModel(flags.trainer.model);
  if (!model.ok()) return fail("model", model.status());
  if (flags.device == "cpu") LogBlasKernels();
  STRATA_LOG(INFO, "worker")
      << "rank " << flags.rank << " of " << flags.num_workers << " on "
      << (*model)->device_name() << ", " << DescribeModel(flags.trainer.model)
      << ", " << flags.shards.size() << " shards, batch "
      << flags.trainer.train.batch_size << ", staleness "
      << flags.trainer.staleness
      << (flags.pull_fp16 ? ", rows pulled as fp16" : "");

  auto collective = MakeCollective(flags, *security);
  if (!collective.ok()) return fail("joining the job", collective.status());
  STRATA_LOG(INFO, "worker")
      << "rank " << flags.rank << " joined " << (*collective)->world_size()
      << " ranks over " << (*collective)->backend();

  TrainingMetrics metrics;
  const WorkerIdentity identity{flags.rank, flags.num_workers,
                                (*model)->device_name(),
                                DescribeModel(flags.trainer.model),
                                static_cast<int>(flags.shards.size())};
  // The status page's charts: a reading of the metrics every second.
  RateHistory history({});
  std::optional<PeriodicTask> sampler;
  HttpServer http;
  TrainerOptions trainer_options = flags.trainer;
  trainer_options.pull_ps = pull_ps.get();
  if (flags.metrics_port >= 0) {
    sampler.emplace(absl::Seconds(1), [&history, &metrics] {
      history.Add(absl::Now(), WorkerReading(metrics.Snapshot()));
    });
    http.Handle("/status", [&identity, &metrics, &history] {
      return HttpServer::Response{
          200, "text/html; charset=utf-8",
          RenderWorkerStatusPage(identity, metrics.Snapshot(),
                                 history.Samples(), /*refresh_seconds=*/2)};
    });
    http.Handle("/healthz", [] {
      return HttpServer::Response{200, "text/plain", "ok\n"};
    });
    http.Handle("/metrics", [&metrics] {
      MetricFamilies families;
      AddBuildInfo(&families, "strata-worker");
      AddProcessMetrics(&families);
      metrics.AddMetrics(&families);
      return HttpServer::Response{200, kMetricsContentType,
                                  MetricsText(families)};
    });
    auto port = http.Start(flags.host, flags.metrics_port);
    if (!port.ok()) return fail("metrics server", port.status());
    STRATA_LOG(INFO, "worker")
        << "rank " << flags.rank << " metrics serving on " << flags.host
        << " metrics_port=" << *port << " (/metrics, /healthz, /status)";
    trainer_options.metrics = &metrics;
  }
  auto trainer = Trainer::Create(std::move(trainer_options), ps->get(),
                                 collective->get(), std::move(*model));
  if (!trainer.ok()) return fail("trainer", trainer.status());
  auto result = (*trainer)->Run();
  if (!result.ok()) return fail("training", result.status());

  std::string summary = absl::StrFormat(
      "done: %d steps, %d examples in %.1f s (%.0f samples/s), loss %.5f",
      result->steps, result->examples, result->seconds,
      result->samples_per_second, result->final_loss);
  if (result->eval.examples > 0) {
    absl::StrAppendFormat(&summary, ", eval AUC %.5f log loss %.5f on %d",
                          result->eval.auc, result->eval.log_loss,
                          result->eval.examples);
  }
  if (result->malformed_lines > 0) {
    absl::StrAppend(&summary, ", ", result->malformed_lines,
                    " malformed lines skipped");
  }
  STRATA_LOG(INFO, "worker") << "rank " << flags.rank << " " << summary;
  http.Stop();
  if (!flags.result_file.empty()) {
    if (absl::Status s = WriteResultFile(flags.result_file, *result); !s.ok()) {
      return fail("writing --result_file", s);
    }
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  // OpenBLAS sizes its thread pool when it loads, from OPENBLAS_NUM_THREADS,
  // and its idle threads spin (sched_yield) on cores that the training
  // shards and this worker's input and push threads need: a few percent of
  // throughput on a small machine. Unless the user chose, run again with one
  // BLAS thread (ranks, not BLAS threads, are how workers scale).
  bool run_again = false;
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    run_again = true;
  }
  // Likewise its kernels, when it has not recognized this CPU (see
  // worker/model/blas_core.h).
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    const std::string chosen = strata::BlasCoreName();
    const std::string better =
        strata::BetterBlasCoreType(chosen, strata::DetectCpuVectorUnits());
    if (!better.empty()) {
      ::setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
      ::setenv(strata::kBlasCoreReplacedVariable, chosen.c_str(), 1);
      run_again = true;
    }
  }
  if (run_again) {
    ::execv("/proc/self/exe", argv);
    // Exec failed: carry on with OpenBLAS's defaults, and do not report a
    // replacement that did not happen.
    ::unsetenv(strata::kBlasCoreReplacedVariable);
  }
  // A peer rank that dies mid-write must surface as an error from the
  // collective, not kill this rank with SIGPIPE (Gloo writes with writev).
  std::signal(SIGPIPE, SIG_IGN);
  // A step frees and allocates again buffers of up to megabytes (batches,
  // rows, activations, gradients): 7-8% of the worker's CPU went to faulting
  // their pages in again under glibc's defaults.
  strata::KeepFreedMemoryForReuse();
  strata::ParseCommandLineWithCluster(
      "strata-worker: one rank of a Strata training job.\n"
      "  strata-worker --shards=H:P,H:P --rank=R --num_workers=N "
      "--train_files=F [--eval_files=F] [flags]\n"
      "  or: strata-worker --cluster_file=cluster.yaml --rank=R [flags]",
      argc, argv, strata::ClusterRole::kWorker);
  auto flags = strata::WorkerFlagsFromCommandLine();
  if (!flags.ok()) {
    return strata::UsageError(std::string(flags.status().message()));
  }
  return strata::Run(*flags);
}
