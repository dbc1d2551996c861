#!/usr/bin/env python3
"""PyTorch click model with its embeddings on Strata (strata.torch).

Trains the DLRM-style model that strata-worker and examples/keras_ctr.py
train, in PyTorch, on Criteo-format text (strata-datagen writes it), and
prints one JSON line: samples/s, CPU seconds per 1,000 samples (of this
process and of the shards), held-out AUC and log loss.

  build/bin/strata-datagen --out=/tmp/d/train --rows=200000 --holdout_rows=50000
  build/bin/strata-server --port=0 --port_file=/tmp/d/port --data_dir=/tmp/d/ps &
  PYTHONPATH=python build/python-venv/bin/python examples/torch_ctr.py \\
      --shards=127.0.0.1:$(cat /tmp/d/port) \\
      --train=/tmp/d/train --holdout=/tmp/d/train.holdout

--embeddings=torch trains the same model with a torch.nn.EmbeddingBag over
a vocabulary of the training keys instead (row 0: keys first seen at
evaluation, never trained, as such a key keeps its initial value on a
shard) and torch.optim.Adagrad with sparse gradients, the rule the shards
apply (a += g^2; w -= lr g / (sqrt(a) + eps), duplicates summed first):
the peer of the Strata run in bench/RESULTS.md. --embeddings=torchrec
does the same with TorchRec's FusedEmbeddingBagCollection on CPU (FBGEMM's
batched embedding kernels with Adagrad fused into backward; needs torchrec
and fbgemm-gpu-cpu of a matching torch).

Data and keys as examples/keras_ctr.py (whose reader this uses). Model:
bottom MLP 13 -> 64 -> 16 (ReLU), the 26 fields' rows of 16 from ONE
table, dot interaction (bottom output and the 351 pairwise dot products),
top MLP 128 -> 64 -> 1, mean sigmoid cross-entropy; dense weights Adam
(lr 1e-3). Rows on the PS: Adagrad lr 0.05, initial accumulator 0.1,
truncated normal stddev 0.01; pulls of batch t+1 overlap step t
(prefetch_ahead) and pushes go in the background (--push_staleness 1).
"""

import argparse
import json
import os
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import keras_ctr  # noqa: E402  (its reader and metrics; imports no TF)

NUM_DENSE, NUM_FIELDS = keras_ctr.NUM_DENSE, keras_ctr.NUM_FIELDS


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--shards", default="",
                   help="host:port of every shard (--embeddings=strata)")
    p.add_argument("--embeddings", default="strata",
                   choices=["strata", "torch", "torchrec"])
    p.add_argument("--train", required=True)
    p.add_argument("--holdout", required=True)
    p.add_argument("--max_train_rows", type=int, default=0, help="0: all")
    p.add_argument("--max_holdout_rows", type=int, default=0, help="0: all")
    p.add_argument("--table", default="torch_ctr_embeddings")
    p.add_argument("--embedding_dim", type=int, default=16)
    p.add_argument("--batch_size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--push_staleness", type=int, default=1)
    p.add_argument("--initial_accumulator", type=float, default=0.1,
                   help="Adagrad's initial accumulator of the rows "
                   "(strata, torch; TorchRec's fused Adagrad starts at 0)")
    p.add_argument("--server_pids", default="",
                   help="comma-separated pids whose CPU time to report")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads")
    return p.parse_args(argv)


class DotInteraction(torch.nn.Module):
    """[bottom, <v_i, v_j> for i < j] over v = (bottom, rows...)."""

    def __init__(self):
        super().__init__()
        upper = torch.triu_indices(NUM_FIELDS + 1, NUM_FIELDS + 1, offset=1)
        self.register_buffer("upper", upper, persistent=False)

    def forward(self, bottom, rows):
        vectors = torch.cat([bottom[:, None, :], rows], dim=1)
        gram = torch.bmm(vectors, vectors.transpose(1, 2))
        return torch.cat([bottom, gram[:, self.upper[0], self.upper[1]]], 1)


def mlp(widths, last_relu):
    layers = []
    for i, (n_in, n_out) in enumerate(zip(widths, widths[1:])):
        linear = torch.nn.Linear(n_in, n_out)
        torch.nn.init.xavier_uniform_(linear.weight)
        torch.nn.init.zeros_(linear.bias)
        layers.append(linear)
        if last_relu or i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class ClickModel(torch.nn.Module):
    """The DLRM around `bag`, an EmbeddingBag of mode "sum" whose bags are
    single ids: forward(dense [b, 13], ids [b, 26]) -> logits [b]."""

    def __init__(self, bag, dim):
        super().__init__()
        self.bag = bag
        self.bottom = mlp([NUM_DENSE, 64, dim], last_relu=True)
        self.interaction = DotInteraction()
        width = dim + NUM_FIELDS * (NUM_FIELDS + 1) // 2
        self.top = mlp([width, 128, 64, 1], last_relu=False)

    def forward(self, dense, ids):
        rows = self.bag(ids.reshape(-1, 1)).reshape(ids.shape[0], NUM_FIELDS,
                                                    -1)
        z = self.interaction(self.bottom(dense), rows)
        return self.top(z).squeeze(1)


def strata_bag(args):
    import strata.torch
    return strata.torch.EmbeddingBag(
        args.table, args.embedding_dim, shards=args.shards, mode="sum",
        optimizer_args={"initial_accumulator": args.initial_accumulator},
        seed=args.seed, push_staleness=args.push_staleness,
        retry_deadline=60.0)


def torch_bag(args, train_keys):
    """A torch.nn.EmbeddingBag over the vocabulary of the training keys and
    the key -> row map (row 0: unseen keys)."""
    vocabulary = np.unique(train_keys)
    bag = torch.nn.EmbeddingBag(vocabulary.size + 1, args.embedding_dim,
                                mode="sum", sparse=True)
    torch.nn.init.trunc_normal_(bag.weight, std=0.01, a=-0.02, b=0.02)

    def rows_of(keys):
        index = np.searchsorted(vocabulary, keys)
        index = np.minimum(index, vocabulary.size - 1)
        return np.where(vocabulary[index] == keys, index + 1, 0)
    return bag, rows_of


class TorchRecBag(torch.nn.Module):
    """TorchRec's FusedEmbeddingBagCollection over one table of the
    training keys' vocabulary shared by the 26 fields, called as the other
    bags are: forward(ids [b*26, 1] row indices) -> rows [b*26, dim]."""

    def __init__(self, num_rows, dim):
        super().__init__()
        from torchrec import EmbeddingBagConfig, PoolingType
        from torchrec.modules.fused_embedding_modules import (
            FusedEmbeddingBagCollection)
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        self.features = [f"C{f + 1}" for f in range(NUM_FIELDS)]
        self.collection = FusedEmbeddingBagCollection(
            tables=[EmbeddingBagConfig(
                name="ctr", embedding_dim=dim, num_embeddings=num_rows,
                feature_names=self.features, pooling=PoolingType.SUM,
                init_fn=lambda w: torch.nn.init.trunc_normal_(
                    w, std=0.01, a=-0.02, b=0.02))],
            optimizer_type=torch.optim.Adagrad,
            optimizer_kwargs={"lr": 0.05, "eps": 1e-8})
        self.keyed_jagged = KeyedJaggedTensor

    def forward(self, ids):
        by_field = ids.reshape(-1, NUM_FIELDS).t().reshape(-1)  # [26 * b]
        features = self.keyed_jagged(
            keys=self.features, values=by_field,
            lengths=torch.ones_like(by_field, dtype=torch.int32))
        pooled = self.collection(features).values()  # [b, 26 * dim]
        return pooled.reshape(-1, pooled.shape[1] // NUM_FIELDS)


def batches(dense, ids, labels, batch_size):
    for start in range(0, len(labels), batch_size):
        end = start + batch_size
        yield (torch.from_numpy(dense[start:end]),
               torch.from_numpy(ids[start:end]),
               torch.from_numpy(labels[start:end]))


def train(model, data, args, prefetch):
    dense_params = [*model.bottom.parameters(), *model.top.parameters()]
    optimizers = [torch.optim.Adam(dense_params, lr=1e-3)]
    if args.embeddings == "torch":
        optimizers.append(torch.optim.Adagrad(
            [model.bag.weight], lr=0.05,
            initial_accumulator_value=args.initial_accumulator,
            eps=1e-8))
    loss_fn = torch.nn.BCEWithLogitsLoss()
    last_loss = 0.0
    for _ in range(args.epochs):
        stream = batches(*data, args.batch_size)
        if prefetch is not None:
            import strata.torch
            stream = strata.torch.prefetch_ahead(stream, prefetch)
        for dense, ids, labels in stream:
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss = loss_fn(model(dense, ids), labels)
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
            last_loss = loss.item()
    return last_loss


def evaluate(model, dense, ids, labels):
    with torch.no_grad():
        logits = torch.cat([model(d, i) for d, i, _ in
                            batches(dense, ids, labels, 16384)]).numpy()
    return keras_ctr.exact_auc(labels, logits), keras_ctr.log_loss(labels,
                                                                    logits)


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    y, dense, values, _ = keras_ctr.read_criteo(args.train,
                                                args.max_train_rows)
    y_hold, dense_hold, values_hold, _ = keras_ctr.read_criteo(
        args.holdout, args.max_holdout_rows)
    keys = keras_ctr.criteo_keys(values)
    keys_hold = keras_ctr.criteo_keys(values_hold)
    if args.embeddings == "strata":
        if not args.shards:
            raise SystemExit("torch_ctr: --embeddings=strata needs --shards")
        bag = strata_bag(args)
        ids, ids_hold = keys.view(np.int64), keys_hold.view(np.int64)
        prefetch = lambda batch: bag.prefetch(batch[1])  # noqa: E731
    else:
        bag, rows_of = torch_bag(args, keys)
        ids, ids_hold = rows_of(keys), rows_of(keys_hold)
        prefetch = None
        if args.embeddings == "torchrec":
            bag = TorchRecBag(bag.num_embeddings, args.embedding_dim)
    model = ClickModel(bag, args.embedding_dim)
    pids = ["self"] + [p for p in args.server_pids.split(",") if p]
    cpu_before = [keras_ctr.cpu_seconds(pid) for pid in pids]
    start = time.perf_counter()
    last_loss = train(model, (dense, ids, y), args, prefetch)
    if args.embeddings == "strata":
        bag.wait_for_pushes()
    seconds = time.perf_counter() - start
    cpu = [keras_ctr.cpu_seconds(pid) - b for pid, b in zip(pids, cpu_before)]
    auc, loss = evaluate(model, dense_hold, ids_hold, y_hold)
    samples = len(y) * args.epochs
    print(json.dumps({
        "embeddings": args.embeddings, "train_rows": len(y),
        "holdout_rows": len(y_hold), "epochs": args.epochs,
        "train_seconds": round(seconds, 3),
        "samples_per_second": round(samples / seconds, 1),
        "trainer_cpu_seconds_per_1k_samples": round(1000 * cpu[0] / samples,
                                                    4),
        "server_cpu_seconds_per_1k_samples": round(
            1000 * sum(cpu[1:]) / samples, 4),
        "train_loss_last_step": round(last_loss, 5),
        "holdout_auc": round(auc, 5), "holdout_log_loss": round(loss, 5),
    }), flush=True)


if __name__ == "__main__":
    main()
