#!/usr/bin/env python3
"""PyTorch with its embeddings on Strata vs torch.nn.EmbeddingBag vs TorchRec.

Runs examples/torch_ctr.py --embeddings=E for every E of --variants, each in
a fresh process, for --rounds rounds, the order rotating every round so
that no variant always runs first; one strata-server
(--durability=periodic) is started for the Strata runs, and its CPU time
counts toward them. Prints each run's JSON line on stderr and, on stdout, a
Markdown table: samples/s, CPU seconds per 1,000 samples (trainer + shard),
held-out AUC, and each variant's ratio to the first variant of the list in
the same round.

  PYTHONPATH=python VENV/bin/python bench/torch_strata_vs_torch.py \\
      --train /tmp/d/train --holdout /tmp/d/train.holdout \\
      --variants strata,torch,torchrec --rounds 3
"""

import argparse
import json
import os
import subprocess
import sys

from local_shard import REPO, LocalShard


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train", required=True)
    p.add_argument("--holdout", required=True)
    p.add_argument("--variants", default="strata,torch,torchrec")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--bin_dir", default=os.environ.get(
        "STRATA_BIN_DIR", str(REPO / "build" / "bin")))
    p.add_argument("--example_args", default="",
                   help="more flags for examples/torch_ctr.py, space-separated")
    return p.parse_args(argv)


def run(variant, args, shard, table):
    command = [sys.executable, str(REPO / "examples" / "torch_ctr.py"),
               f"--embeddings={variant}", f"--train={args.train}",
               f"--holdout={args.holdout}", f"--table={table}",
               *args.example_args.split()]
    if variant == "strata":
        command += [f"--shards={shard.address}",
                    f"--server_pids={shard.proc.pid}"]
    done = subprocess.run(command, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SystemExit(f"torch bench: {variant} exited {done.returncode}:"
                         f"\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(result), file=sys.stderr, flush=True)
    return result


def main(argv=None):
    args = parse_args(argv)
    variants = args.variants.split(",")
    print(f"load average at the start: {os.getloadavg()[0]:.2f}",
          file=sys.stderr)
    shard = LocalShard(args.bin_dir)
    try:
        rounds = []
        for r in range(args.rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            results = {v: run(v, args, shard, f"torch_bench_{r}")
                       for v in order}
            rounds.append((order, results))
    finally:
        shard.stop()
    base = variants[0]
    print("| round | order | variant | samples/s | CPU-s per 1k samples "
          "(trainer + shard) | held-out AUC | samples/s vs "
          f"`{base}` | CPU vs `{base}` |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for r, (order, results) in enumerate(rounds, 1):
        b = results[base]
        b_cpu = (b["trainer_cpu_seconds_per_1k_samples"] +
                 b["server_cpu_seconds_per_1k_samples"])
        for v in variants:
            x = results[v]
            cpu = (x["trainer_cpu_seconds_per_1k_samples"] +
                   x["server_cpu_seconds_per_1k_samples"])
            print(f"| {r} | {','.join(order)} | `{v}` | "
                  f"{x['samples_per_second']:,.0f} | {cpu:.4f} | "
                  f"{x['holdout_auc']:.4f} | "
                  f"{x['samples_per_second'] / b['samples_per_second']:.2f} | "
                  f"{cpu / b_cpu:.2f} |")


if __name__ == "__main__":
    main()
