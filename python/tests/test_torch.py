"""strata.torch against the live two-shard cluster, each case in a FRESH
Python process (as a user's job starts one): the pooled rows equal
torch.nn.EmbeddingBag's, one optimizer step changes the PS rows exactly as
the table's optimizer says, two DistributedDataParallel ranks on CPU (gloo)
end with identical dense parameters, and bad input is refused clearly."""

import json
import pathlib
import subprocess
import sys

import pytest

from fresh_process import finish_script, start_script
from strata_cluster import REPO, Cluster, binary, free_port

pytest.importorskip("torch", reason="torch is not installed in this Python "
                    "(python/run_tests.sh installs it)")

CASE_TIMEOUT = 180

# After fresh_process.CASE_HEADER (SHARDS, TABLE, WORK, report).
PRELUDE = '''
import torch
import strata.torch as st
torch.manual_seed(0)
'''


def start_case(body, shards, table, workdir, env=None):
    rank = (env or {}).get("RANK", "main")
    return start_script(PRELUDE, body, shards, table, workdir, env,
                        log_name=f"{table}-{rank}")


def finish_case(process, log_path):
    return finish_script(process, log_path, CASE_TIMEOUT)[0]


def run_case(body, shards, table, workdir):
    return finish_case(*start_case(body, shards, table, workdir))


@pytest.fixture(scope="module")
def shards(shard_addresses):
    return ",".join(shard_addresses)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("torch-fresh")


def test_pooled_rows_equal_torch_embedding_bag(shards, workdir):
    result = run_case('''
        bag = st.EmbeddingBag(TABLE, 8, shards=SHARDS, seed=5,
                              initializer="uniform",
                              initializer_args={"min": -1, "max": 1})
        weights = bag.pull(torch.arange(50))
        assert weights.abs().max() > 0.1, weights  # not all zeros
        ids = torch.tensor([3, 1, 3, 7, 1, 49, 3, 0], dtype=torch.int64)
        offsets = torch.tensor([0, 3, 3, 5])  # bag 1 is empty
        fixed = torch.tensor([[4, 4, 9], [0, 2, 49]])
        psw = torch.tensor([0.5, -2.0, 1.0, 3.0, 0.25, 1.5, -1.0, 2.0])
        gaps = {}
        for mode in st.MODES:
            bag.mode = mode
            ref = torch.nn.EmbeddingBag.from_pretrained(weights, mode=mode)
            with torch.no_grad():
                gaps[mode] = (bag(ids, offsets) - ref(ids, offsets)).abs().max().item()
                gaps[mode + "_2d"] = (bag(fixed) - ref(fixed)).abs().max().item()
                bag.include_last_offset = True
                last = torch.tensor([0, 3, 3, 5, 8])
                gaps[mode + "_last"] = (bag(ids, last) - torch.nn.EmbeddingBag.from_pretrained(
                    weights, mode=mode, include_last_offset=True)(ids, last)).abs().max().item()
                bag.include_last_offset = False
        bag.mode = "sum"
        ref = torch.nn.EmbeddingBag.from_pretrained(weights, mode="sum")
        with torch.no_grad():
            gaps["sum_weighted"] = (bag(ids, offsets, psw) -
                                    ref(ids, offsets, psw)).abs().max().item()
            empty = bag(ids, offsets)[1].abs().max().item()
        report(gaps=gaps, empty=empty, shape=list(bag(ids, offsets).shape))
    ''', shards, "torch_forward", workdir)
    assert result["shape"] == [4, 8]
    assert result["empty"] == 0.0
    for case, gap in result["gaps"].items():
        assert gap <= 1e-6, (case, gap)


def test_one_step_changes_rows_as_the_table_optimizer_says(shards, workdir):
    # SGD, synchronous and background pushes: row -= lr * (the gradient of
    # the row summed over its occurrences), which torch's own EmbeddingBag
    # computes as weight.grad. Adagrad: a += g^2; row -= lr g / sqrt(a).
    result = run_case('''
        ids = torch.tensor([3, 1, 3, 7, 1, 9, 3], dtype=torch.int64)
        offsets = torch.tensor([0, 3, 3, 5])
        coefficients = torch.randn(4, 6)
        gaps = {}
        for name, staleness, optimizer in (("sgd_sync", 0, "sgd"),
                                           ("sgd_async", 2, "sgd"),
                                           ("adagrad", 1, "adagrad")):
            bag = st.EmbeddingBag(f"{TABLE}_{name}", 6, shards=SHARDS,
                                  mode="mean", optimizer=optimizer,
                                  learning_rate=0.5,
                                  optimizer_args={} if optimizer == "sgd" else
                                  {"initial_accumulator": 0.1},
                                  initializer="uniform",
                                  initializer_args={"min": -1, "max": 1},
                                  push_staleness=staleness)
            before = bag.pull(torch.arange(12))
            ref = torch.nn.EmbeddingBag.from_pretrained(before.clone(),
                                                        freeze=False,
                                                        mode="mean")
            (bag(ids, offsets) * coefficients).sum().backward()
            (ref(ids, offsets) * coefficients).sum().backward()
            bag.wait_for_pushes()
            g = ref.weight.grad
            if optimizer == "sgd":
                expected = before - 0.5 * g
            else:
                touched = (g != 0).any(dim=1, keepdim=True)
                step = 0.5 * g / torch.sqrt(0.1 + g * g)
                expected = torch.where(touched, before - step, before)
            after = bag.pull(torch.arange(12))
            gaps[name] = (after - expected).abs().max().item()
            gaps[name + "_moved"] = (after - before).abs().max().item()
        report(gaps=gaps)
    ''', shards, "torch_step", workdir)
    gaps = result["gaps"]
    for name in ("sgd_sync", "sgd_async", "adagrad"):
        assert gaps[name] <= 1e-5, (name, gaps)
        assert gaps[name + "_moved"] > 1e-3, (name, gaps)


def test_a_changed_shard_map_is_followed_without_an_error(workdir):
    # Its own two shards: the job gives a bucket of shard 1 to shard 0
    # (SetShardMap on both, as a bucket move ends) between two steps; the C
    # client under strata.torch routes by the first map, is refused, fetches
    # version 2 and carries on. Rows stay exact (SGD against torch's own).
    cluster = Cluster("strata-torch-map-")
    try:
        shards = ",".join(s.address for s in cluster.start_shards(2))
        result = run_case('''
            import grpc
            from strata._proto import strata_pb2, strata_pb2_grpc
            from strata.hashing import NUM_BUCKETS, buckets_of
            bag = st.EmbeddingBag(TABLE, 4, shards=SHARDS, mode="sum",
                                  optimizer="sgd", learning_rate=1.0,
                                  initializer="uniform",
                                  initializer_args={"min": -1, "max": 1})
            keys = torch.arange(200)
            buckets = buckets_of(TABLE, keys.numpy().astype(np.uint64))
            owners = np.arange(NUM_BUCKETS) % 2
            before = bag.pull(keys)
            # A bucket of shard 1 that none of the keys is in yet: a key of
            # it, found past them, gets its first row on shard 0.
            empty = next(b for b in range(1, NUM_BUCKETS, 2)
                         if b not in set(buckets.tolist()))
            moved = next(k for k in range(200, 10**6)
                         if int(buckets_of(TABLE, np.array([k], np.uint64))[0]) == empty)
            owners[empty] = 0
            request = strata_pb2.SetShardMapRequest(map=strata_pb2.ShardMap(
                version=2, num_shards=2, bucket_owners=owners.tolist()))
            for address in SHARDS.split(","):
                with grpc.insecure_channel(address) as channel:
                    stub = strata_pb2_grpc.ParameterServerStub(channel)
                    assert stub.SetShardMap(request, timeout=10).changed
            ids = torch.cat([keys, torch.tensor([moved])])
            start = bag.pull(ids)
            ref = torch.nn.EmbeddingBag.from_pretrained(start.clone(),
                                                        freeze=False,
                                                        mode="sum")
            offsets = torch.tensor([0, 50, 120])
            coefficients = torch.randn(3, 4)
            (bag(ids, offsets) * coefficients).sum().backward()
            (ref(torch.arange(len(ids)), offsets) * coefficients).sum().backward()
            bag.wait_for_pushes()
            expected = start - ref.weight.grad
            report(unchanged=(start[:200] - before).abs().max().item(),
                   gap=(bag.pull(ids) - expected).abs().max().item(),
                   moved=(bag.pull(ids) - start).abs().max().item())
        ''', shards, "torch_map", workdir)
    finally:
        cluster.stop()
    assert result["unchanged"] == 0.0
    assert result["gap"] <= 1e-6, result
    assert result["moved"] > 1e-3, result


def test_two_ddp_ranks_train_and_end_with_identical_dense_parameters(
        shards, workdir):
    # Each rank trains on its own half of a learnable task (the label is the
    # parity of the first id) with prefetched pulls and background pushes;
    # DDP allreduces the dense gradients over gloo.
    body = '''
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        rank = int(os.environ["RANK"])
        dist.init_process_group("gloo", rank=rank, world_size=2)

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bag = st.EmbeddingBag(TABLE, 4, shards=SHARDS,
                                           mode="sum", learning_rate=0.2,
                                           seed=1)
                self.dense = torch.nn.Linear(4, 1)
            def forward(self, ids):
                return self.dense(self.bag(ids)).squeeze(1)

        model = DDP(Model())
        optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
        rng = np.random.default_rng(rank)
        batches = []
        for _ in range(60):
            ids = rng.integers(0, 40, size=(64, 2))
            batches.append((torch.from_numpy(ids),
                            torch.from_numpy((ids[:, 0] % 2).astype(np.float32))))
        loss_fn = torch.nn.BCEWithLogitsLoss()
        losses = []
        for ids, labels in st.prefetch_ahead(
                batches, lambda b: model.module.bag.prefetch(b[0])):
            optimizer.zero_grad()
            loss = loss_fn(model(ids), labels)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        st.wait_for_pushes()
        dist.barrier()
        state = {k: v.tolist() for k, v in model.module.dense.state_dict().items()}
        with open(os.path.join(WORK, f"dense-{rank}.json"), "w") as f:
            json.dump(state, f)
        dist.destroy_process_group()
        report(first=float(np.mean(losses[:5])), last=float(np.mean(losses[-5:])),
               prefetch_hits=model.module.bag.prefetch_hits)
    '''
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    ranks = [start_case(body, shards, "torch_ddp", workdir,
                        dict(env, RANK=str(rank))) for rank in range(2)]
    results = [finish_case(*rank) for rank in ranks]
    dense = [json.loads((workdir / f"dense-{rank}.json").read_text())
             for rank in range(2)]
    assert dense[0] == dense[1]
    for result in results:
        assert result["last"] < 0.6 * result["first"], results
        # Every batch but the first came from a prefetch.
        assert result["prefetch_hits"] == 59, results


def test_bad_input_is_refused_naming_what_is_wrong(shards, workdir):
    result = run_case('''
        def error(f):
            try:
                f()
            except Exception as e:  # noqa: BLE001
                return f"{type(e).__name__}: {e}"
            return "no error"
        bag = st.EmbeddingBag(TABLE, 4, shards=SHARDS, mode="sum")
        report(
            float_ids=error(lambda: bag(torch.tensor([[1.0, 2.0]]))),
            no_offsets=error(lambda: bag(torch.tensor([1, 2]))),
            offsets_2d=error(lambda: bag(torch.tensor([[1, 2]]),
                                         torch.tensor([0]))),
            weights_mean=error(lambda: st.EmbeddingBag(
                TABLE + "_m", 4, shards=SHARDS, mode="mean")(
                    torch.tensor([1]), torch.tensor([0]), torch.tensor([1.0]))),
            mode=error(lambda: st.EmbeddingBag(TABLE, 4, shards=SHARDS,
                                               mode="median")),
            optimizer=error(lambda: st.EmbeddingBag(
                TABLE, 4, shards=SHARDS, optimizer="rmsprop")),
            other_dim=error(lambda: st.EmbeddingBag(TABLE, 5, shards=SHARDS)),
            no_shard=error(lambda: st.EmbeddingBag(
                TABLE, 4, shards="127.0.0.1:1", retry_deadline=1.0)),
        )
    ''', shards, "torch_bad", workdir)
    assert result["float_ids"].startswith("TypeError: strata.torch: ids must "
                                          "be int64"), result
    assert "1-D input needs offsets" in result["no_offsets"], result
    assert "offsets must be None" in result["offsets_2d"], result
    assert "per_sample_weights need mode='sum'" in result["weights_mean"]
    assert "mode 'median' is not one of" in result["mode"], result
    assert "unknown optimizer 'rmsprop'" in result["optimizer"], result
    assert result["other_dim"].startswith("AlreadyExistsError"), result
    assert "dim" in result["other_dim"], result
    assert result["no_shard"].startswith("UnavailableError"), result
    assert "127.0.0.1:1" in result["no_shard"], result


def test_the_pytorch_example_trains_the_dlrm_on_strata(shards, workdir):
    """examples/torch_ctr.py on strata-datagen rows: it trains, evaluates
    and reports, with its embeddings on the cluster."""
    data = pathlib.Path(workdir) / "ctr"
    subprocess.run([binary("strata-datagen"), f"--out={data}",
                    "--rows=40000", "--holdout_rows=5000"], check=True,
                   capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "torch_ctr.py"),
         f"--shards={shards}", f"--train={data}", f"--holdout={data}.holdout",
         "--table=torch_example"], capture_output=True, text=True,
        timeout=CASE_TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["embeddings"] == "strata"
    assert result["train_rows"] == 40000 and result["holdout_rows"] == 5000
    assert result["samples_per_second"] > 0
    assert 0.55 < result["holdout_auc"] < 1, result
