"""PyTorch over Strata: EmbeddingBag, a torch.nn.EmbeddingBag whose rows live
on a Strata training PS (pulled in forward, their summed gradients pushed in
backward and applied by the table's optimizer on the shards).

Needs torch and the C client library libstrata_tf_client.so (built with
Strata: cmake --build build --target strata_tf_client), which is loaded
through ctypes; no op library is compiled against torch. See
python/README.md, "PyTorch".
"""

from ._client import Client, load_library
from .embedding import (MODES, EmbeddingBag, prefetch_ahead, shared_client,
                        wait_for_pushes)

__all__ = ["Client", "EmbeddingBag", "MODES", "load_library",
           "prefetch_ahead", "shared_client", "wait_for_pushes"]
