"""The virtual cluster against its two-tier model: 2 nodes x 2 ranks, the inter-node link at a tenth
of the intra-node one.

Makes ``collnb.cluster(2, 2, inter=R/10, intra=R)`` (network namespaces; needs root or
CAP_NET_ADMIN + CAP_SYS_ADMIN, else it says why and stops), then:

1. **the shaped links' rates**: one stream of 16 MiB gloo ``send``s, rank 0 to rank 2 (across the
   inter-node link) and rank 0 to rank 1 (the node's shaped loopback); each rate over the rate
   asked. tbf counts frame headers, so a veth's TCP payload reaches at most 1448/1514 = 0.956 of it.
   Target: within 15 % of the rate asked.
2. **hierarchical all_reduce vs the flat ring at 16 MiB**: float32 SUM, interleaved (one call of
   each variant per repeat, a barrier before each, the slowest rank's time; medians), so that other
   load on the machine hits both alike: the flat ring (collnb's ring schedule, and gloo's own
   ``all_reduce`` beside it), the hierarchical schedule (intra reduce-scatter, inter all_reduce,
   intra all-gather: :mod:`collnb.algorithms.tiers`). The measured speed-up flat/hierarchical over
   the model's (:class:`collnb.labs.cluster.TierModel` with the measured rates, the shared
   loopback priced as shared). Target: within 25 %.

Prints the machine's load average before and after (the runs share 2 cores with whatever else
runs). Usage: ``python benchmarks/virtual_cluster.py [--intra-gbps 4] [--repeats 5] [--size-mib 16]``
"""
import argparse
import os
import statistics
import sys
import time

MiB = 1 << 20


def rank_pair(rank, world_size, nbytes, repeats):
    """Per variant, the slowest rank's seconds of each repeat (interleaved)."""
    import torch
    import torch.distributed as dist

    from collnb.algorithms import cached_schedule, execute
    ring = cached_schedule("all_reduce", "ring", world_size, ranks_per_node=2)
    hier = cached_schedule("all_reduce", "hierarchical", world_size, ranks_per_node=2)
    x = torch.ones(nbytes // 4)
    variants = {"ring": lambda t: execute(ring, t), "hierarchical": lambda t: execute(hier, t),
                "gloo all_reduce": lambda t: dist.all_reduce(t)}
    times = torch.zeros(len(variants), repeats + 1, dtype=torch.float64)
    for k in range(repeats + 1):  # k == 0: warm-up
        for v, fn in enumerate(variants.values()):
            t = x.clone()
            dist.barrier()
            t0 = time.perf_counter()
            fn(t)
            times[v, k] = time.perf_counter() - t0
            assert torch.equal(t, torch.full_like(t, world_size)), "wrong sum"
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    return {name: times[v, 1:].tolist() for v, name in enumerate(variants)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--intra-gbps", type=float, default=4.0, help="intra-node rate (the inter-node one is a tenth)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--size-mib", type=int, default=16)
    args = p.parse_args()
    from collnb.labs.cluster import cluster
    load0 = os.getloadavg()
    intra, inter = args.intra_gbps, args.intra_gbps / 10
    c = cluster(2, 2, inter=inter, intra=intra, mode=None)
    if c.mode != "emulated":
        print(f"no virtual cluster here ({c.why}); nothing measured")
        return 2
    with c:
        print(c.describe())
        link = c.measure(nbytes=16 * MiB, repeats=3, verbose=False)
        inter_ratio, intra_ratio = link.inter_gbps / inter, link.intra_gbps / intra
        print(f"inter-node link: {link.inter_gbps:.3f} Gbit/s measured / {inter:.3f} asked = {inter_ratio:.3f}"
              f"  [{'PASS' if abs(1 - inter_ratio) <= 0.15 else 'FAIL'} within 15 %]")
        print(f"intra-node (shaped loopback): {link.intra_gbps:.3f} Gbit/s measured / {intra:.3f} asked = "
              f"{intra_ratio:.3f}  [{'PASS' if abs(1 - intra_ratio) <= 0.15 else 'FAIL'} within 15 %]")
        model = c.model()
        nbytes = args.size_mib * MiB
        out = c.launch(rank_pair, (nbytes, args.repeats), timeout=1800)[0]
        med = {k: statistics.median(v) for k, v in out.items()}
        for k, v in out.items():
            print(f"  {k:>16}: median {med[k] * 1e3:8.1f} ms  (min {min(v) * 1e3:.1f}, max {max(v) * 1e3:.1f}; "
                  f"{len(v)} repeats)")
        pf, ph = model.predict("all_reduce", "ring", nbytes), model.predict("all_reduce", "hierarchical", nbytes)
        print(f"  model (measured rates, shared loopback): ring {pf * 1e3:.1f} ms, hierarchical {ph * 1e3:.1f} ms")
        want = pf / ph
        for flat in ("ring", "gloo all_reduce"):
            got = med[flat] / med["hierarchical"]
            r = got / want
            print(f"{args.size_mib} MiB, {flat} / hierarchical: measured {got:.3f}, model {want:.3f}, measured/model "
                  f"{r:.3f}  [{'PASS' if abs(1 - r) <= 0.25 else 'FAIL'} within 25 %]")
    print(f"load average (1, 5, 15 min): before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; after "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f"; {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
