"""Ray Data throughput of ctxprune_rs.ray.SelectBatches on this machine, against direct
calls: 2,000 queries, MMR k = 10, over one shared pool (N = 5,000, d = 384, clustered, in a
.npy every actor loads once), on a local Ray cluster (`num_cpus` = the machine's cores).
Reports queries per second with 1 and 2 actors (median of `--repeats` runs of the whole
dataset after one warm-up run; the cluster's start is excluded, but each run is a new
`map_batches`, so it starts its actors and they load the pool: that start is included,
spread over the rows), the same queries as a sequential loop of `Selector.select` in this
process, and the per-row overhead of the Ray path over that loop.

Run: python benches/ray_data.py [--queries 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import ray

import ctxprune_rs
from ctxprune_rs.ray import SelectBatches


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((60, 384))
    pool = (centres[rng.integers(0, 60, 5000)] + 0.5 * rng.standard_normal((5000, 384))).astype(np.float32)
    queries = (centres[rng.integers(0, 60, a.queries)] + 0.3 * rng.standard_normal((a.queries, 384))).astype(np.float32)
    path = os.path.join(tempfile.mkdtemp(), "pool.npy")
    np.save(path, pool)

    sel = ctxprune_rs.Selector("mmr", k=10)
    p = ctxprune_rs.Pool(pool)
    direct = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        for q in queries:
            sel.select(p, q)
        direct.append(time.perf_counter() - t)
    d = statistics.median(direct)
    print(f"direct Selector.select loop: {a.queries / d:,.0f} queries/s ({d * 1e3 / a.queries:.3f} ms/query)")

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    items = [{"id": i, "query": q, "pool": "docs"} for i, q in enumerate(queries)]
    for actors in (1, 2):
        times = []
        for r in range(a.repeats + 1):
            ds = ray.data.from_items(items)
            t = time.perf_counter()
            n = ds.map_batches(SelectBatches, batch_format="numpy", batch_size=200, compute=ray.data.ActorPoolStrategy(size=actors),
                               fn_constructor_kwargs={"method": "mmr", "k": 10, "pools": {"docs": path},
                                                      "backend": "cpu"}).count()
            if r:
                times.append(time.perf_counter() - t)
            assert n == a.queries
        m = statistics.median(times)
        over = (m * actors - d) / a.queries * 1e3
        print(f"Ray Data, {actors} actor(s): {a.queries / m:,.0f} queries/s ({m:.2f} s for {a.queries}; "
              f"per-row overhead over the direct loop, actor time: {over:.3f} ms)")
    ray.shutdown()


if __name__ == "__main__":
    main()
