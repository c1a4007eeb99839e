#!/usr/bin/env python3
"""Turn bench_queues' JSON (scripts/run-benchmarks.sh) into the ratio tables
of docs/benchmarks.md, "Queues".

    python3 bench/queues/ratios.py [bench/results/bench_queues.json]

Uses the median of the repetitions when the run has aggregates, else the
single run. Ratios are tpool / peer throughput: above 1 means tpool is faster.
"""
import json
import re
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rate = {}
    for b in doc["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = re.sub(r"/real_time$", "", b.get("run_name", b["name"]))
        rate[name] = b["items_per_second"] / 1e6
    return doc["context"], rate


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


def ratio(a, b):
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/bench_queues.json"
    ctx, r = load(path)
    print(f"host {ctx.get('host_name')}, {ctx.get('num_cpus')} CPUs at "
          f"{ctx.get('mhz_per_cpu')} MHz, {ctx.get('date')}, load {ctx.get('load_avg')}\n")

    owners = ["tpool_RingQueue", "tpool_WorkDeque", "tpool_BoundedRing", "moodycamel", "boost_lockfree"]
    ring = r.get("owner_push_pop/tpool_RingQueue")
    print("Owner push+pop, one thread (M items/s; ratio = RingQueue / this)\n")
    print(table(["queue", "M items/s", "RingQueue / this"],
                [[q, fmt(r.get(f"owner_push_pop/{q}")), ratio(ring, r.get(f"owner_push_pop/{q}"))]
                 for q in owners]))

    print("\nOne owner, N thieves (M items/s)\n")
    rows = []
    for n in range(1, 9):
        vals = {q: r.get(f"spmc/{q}/stealers:{n}") for q in
                ["tpool_RingQueue", "tpool_WorkDeque", "moodycamel_bulk", "boost_lockfree"]}
        if all(v is None for v in vals.values()):
            continue
        rows.append([str(n)] + [fmt(v) for v in vals.values()] +
                    [ratio(vals["tpool_RingQueue"], vals["moodycamel_bulk"]),
                     ratio(vals["tpool_RingQueue"], vals["boost_lockfree"])])
    print(table(["thieves", "RingQueue steal_half", "WorkDeque steal_top", "moodycamel bulk",
                 "boost", "RingQueue / moodycamel", "RingQueue / boost"], rows))

    print("\nMPMC, P producers x C consumers (M items/s)\n")
    rows = []
    for p in range(1, 5):
        for c in range(1, 5):
            k = f"P:{p}/C:{c}"
            vals = {q: r.get(f"mpmc/{q}/{k}") for q in
                    ["tpool_BoundedRing", "tpool_BoundedRing_pop_many", "moodycamel",
                     "moodycamel_bulk", "boost_lockfree"]}
            if all(v is None for v in vals.values()):
                continue
            rows.append([f"{p}x{c}"] + [fmt(v) for v in vals.values()] +
                        [ratio(vals["tpool_BoundedRing"], vals["moodycamel"]),
                         ratio(vals["tpool_BoundedRing_pop_many"], vals["moodycamel_bulk"]),
                         ratio(vals["tpool_BoundedRing"], vals["boost_lockfree"])])
    print(table(["PxC", "BoundedRing pop", "BoundedRing pop_many", "moodycamel", "moodycamel bulk",
                 "boost", "pop / moodycamel", "pop_many / moodycamel bulk", "pop / boost"], rows))

    print("\nLocal queue full: fall back vs move half (M items/s)\n")
    rows = []
    for burst in (512, 4096):
        fb = r.get(f"local_overflow_fallback/burst:{burst}")
        mh = r.get(f"local_overflow_move_half/burst:{burst}")
        rows.append([str(burst), fmt(fb), fmt(mh), ratio(fb, mh)])
    print(table(["burst", "fall back", "move half", "fall back / move half"], rows))


if __name__ == "__main__":
    main()
