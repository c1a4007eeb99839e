#!/usr/bin/env python3
"""tpoold's durable-store metrics around one bench run (bench/peers/run.sh).

  store_metrics.py scrape URL FILE        save tpoold's /metrics text to FILE
  store_metrics.py settle URL FILE        the same, once the store is quiet: the
                                          commit count unchanged over 100 ms (the
                                          last jobs' end records may be committed
                                          just after the client saw their results)
  store_metrics.py annotate BEFORE AFTER  read one `tpoolctl bench --json` line
                                          on stdin, print it with "store" added

"store" is computed from the difference AFTER - BEFORE of two histograms
(docs/metrics.md): tpoold_store_jobs_per_commit (one observation per commit,
of the records it wrote: accepts, starts, ends, retries; one commit = one
fsync) and tpoold_store_commit_duration_seconds:

  commits                 delta of tpoold_store_jobs_per_commit_count
  records_committed       delta of tpoold_store_jobs_per_commit_sum
  fsyncs_per_1000_jobs    commits / the run's jobs * 1000
  records_per_commit      records_committed / commits
  commit_p50_ms, _p99_ms  from the delta of the duration buckets, interpolated
                          linearly inside a bucket as Prometheus'
                          histogram_quantile does (so: bucket resolution)

Series with labels are summed per `le`. A metric missing from both scrapes
(a tpoold without the store) gives "store": null.
"""
import json
import re
import sys
import time
import urllib.request

JOBS = "tpoold_store_jobs_per_commit"
DURATION = "tpoold_store_commit_duration_seconds"
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')
LE = re.compile(r'le="([^"]*)"')


def parse(path):
    """{name: {le or None: value summed over label sets}}"""
    out = {}
    for line in open(path):
        if line.startswith("#"):
            continue
        m = LINE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        le = LE.search(labels)
        key = le.group(1) if le else None
        try:
            v = float(value)
        except ValueError:
            continue
        series = out.setdefault(name, {})
        series[key] = series.get(key, 0.0) + v
    return out


def value(m, name):
    return m.get(name, {}).get(None)


def quantile(q, buckets):
    """buckets: [(upper bound, cumulative count)] sorted, +Inf last."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if le == float("inf"):
                return lower  # beyond the largest finite bound: report that bound
            if cum == below:
                return le
            return lower + (le - lower) * (rank - below) / (cum - below)
        lower, below = le, cum
    return lower


def annotate(before_path, after_path):
    row = json.loads(sys.stdin.read())
    before, after = parse(before_path), parse(after_path)
    if value(after, JOBS + "_count") is None:
        row["store"] = None
        print(json.dumps(row))
        return
    commits = value(after, JOBS + "_count") - (value(before, JOBS + "_count") or 0)
    committed = value(after, JOBS + "_sum") - (value(before, JOBS + "_sum") or 0)
    b_before = before.get(DURATION + "_bucket", {})
    b_after = after.get(DURATION + "_bucket", {})
    buckets = sorted(
        (float(le), b_after[le] - b_before.get(le, 0.0)) for le in b_after if le is not None)
    p50, p99 = quantile(0.5, buckets), quantile(0.99, buckets)
    jobs = row.get("jobs", 0)
    row["store"] = {
        "commits": int(round(commits)),
        "records_committed": int(round(committed)),
        "fsyncs_per_1000_jobs": round(commits / jobs * 1000, 2) if jobs else None,
        "records_per_commit": round(committed / commits, 2) if commits else None,
        "commit_p50_ms": round(p50 * 1000, 3) if p50 is not None else None,
        "commit_p99_ms": round(p99 * 1000, 3) if p99 is not None else None,
    }
    print(json.dumps(row))


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()
    except OSError as e:
        sys.exit(f"store_metrics: cannot scrape {url}: {e}; is tpoold's [metrics] listener up?")


def commits(text):
    m = re.search(r"^" + JOBS + r"_count(?:\{[^}]*\})?\s+(\S+)", text, re.M)
    return m.group(1) if m else None


def scrape(url, path, settle=False):
    text = fetch(url)
    for _ in range(50 if settle else 0):  # at most ~5 s
        time.sleep(0.1)
        again = fetch(url)
        quiet = commits(again) == commits(text)
        text = again
        if quiet:
            break
    open(path, "w").write(text)


def main(argv):
    if len(argv) == 4 and argv[1] in ("scrape", "settle"):
        scrape(argv[2], argv[3], settle=argv[1] == "settle")
    elif len(argv) == 4 and argv[1] == "annotate":
        annotate(argv[2], argv[3])
    else:
        sys.exit("usage: store_metrics.py scrape|settle URL FILE | annotate BEFORE AFTER < bench.json")


if __name__ == "__main__":
    main(sys.argv)
