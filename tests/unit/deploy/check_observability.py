#!/usr/bin/env python3
"""Checks that the Prometheus rules, the Grafana dashboard and the HPA's
adapter rule name only metrics tpoold exports (the names daemon/metrics/src
registers, else issue 8's list while it does not exist) or recording rules defined in
deploy/prometheus/rules, and that the dashboard shows what issue 8 asks:
throughput, latency percentiles, queue depths, stalls and overflow workers.
"""

import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from deploy_facts import ROOT, Checker  # noqa: E402

import yaml  # python3-yaml (scripts/install-deps.sh test)

# Issue 8's names: the fallback while docs/metrics.md does not exist.
ISSUE_8_METRICS = {
    "tpoold_watchdog_stalls_total", "tpoold_watchdog_stalled_workers",
    "tpoold_overflow_workers_spawned_total", "tpoold_overflow_workers_retired_total",
    "tpoold_overflow_workers", "tpoold_overflow_workers_max", "tpoold_pool_queue_depth",
    "tpoold_pool_descriptors_live", "tpoold_pool_descriptors_capacity",
    "tpoold_jobs_submitted_total", "tpoold_jobs_completed_total", "tpoold_jobs_rejected_total",
    "tpoold_job_wait_seconds", "tpoold_job_run_seconds", "tpoold_pool_workers",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def exported_metrics():
    """The names tpoold registers (the string literals in daemon/metrics/src),
    or issue 8's list while the exporter does not exist."""
    src = ROOT / "daemon/metrics/src"
    names = set()
    for path in sorted(src.glob("*.cc")) if src.is_dir() else []:
        names |= set(re.findall(r'"(tpoold_[a-z0-9_]+)"', path.read_text()))
    if not names:
        return ISSUE_8_METRICS, "issue 8"
    return names, "daemon/metrics/src"


def names_in(expr):
    metrics = set(re.findall(r"(?<![:\w])tpoold_[a-z0-9_]+", expr))
    recorded = set(re.findall(r"\btpoold:[a-z0-9_:]+", expr))
    return metrics, recorded


def known(name, exported):
    if name in exported:
        return True
    return any(name.endswith(s) and name[: -len(s)] in exported for s in HISTOGRAM_SUFFIXES)


def main():
    c = Checker("observability")
    exported, source = exported_metrics()
    rules_dir = ROOT / "deploy/prometheus/rules"
    recorded_defined, exprs = set(), []
    for path in sorted(rules_dir.glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "record" in rule:
                    recorded_defined.add(rule["record"])
                exprs.append((f"{path.name}: {rule.get('record') or rule.get('alert')}",
                              rule["expr"]))
    dash_path = ROOT / "deploy/grafana/tpoold-dashboard.json"
    dash = json.loads(dash_path.read_text())
    c.check(dash.get("uid") and dash.get("title"), "the dashboard has no uid or title")
    dash_exprs = []
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            dash_exprs.append((f"dashboard panel '{panel['title']}'", t["expr"]))
    adapter = yaml.safe_load((ROOT / "deploy/k8s/prometheus-adapter-rules.yaml").read_text())
    for r in yaml.safe_load(adapter["data"]["config.yaml"])["rules"]:
        exprs.append(("prometheus-adapter rule", r["seriesQuery"]))

    for where, expr in exprs + dash_exprs:
        metrics, recorded = names_in(expr)
        for m in sorted(metrics):
            c.check(known(m, exported), f"{where} uses {m}, which {source} does not list")
        for r in sorted(recorded):
            c.check(r in recorded_defined, f"{where} uses {r}, which no recording rule defines")

    shown = set()
    for _, expr in dash_exprs:
        shown |= names_in(expr)[0]
    for need, why in (("tpoold_jobs_completed_total", "throughput"),
                      ("tpoold_job_wait_seconds_bucket", "wait latency percentiles"),
                      ("tpoold_job_run_seconds_bucket", "run latency percentiles"),
                      ("tpoold_pool_queue_depth", "queue depths"),
                      ("tpoold_watchdog_stalls_total", "watchdog stalls"),
                      ("tpoold_overflow_workers", "overflow workers")):
        c.check(need in shown, f"the dashboard does not show {need} ({why})")
    c.check(any("histogram_quantile(0.99" in e for _, e in dash_exprs),
            "the dashboard has no p99 panel")
    print(f"observability: metric names checked against {source}")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
