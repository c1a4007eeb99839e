#!/usr/bin/env bash
# Regenerate the benchmark report from the last measured results.
#
#   scripts/bench-report.sh            (make bench-report)
#   scripts/bench-report.sh --run [BUILD_DIR]   measure first (bench/peers/run.sh)
#
# Peers: reads bench/results/peers.json (written by bench/peers/run.sh) and
# rewrites the part of docs/benchmarks.md between the `peers:begin` and
# `peers:end` markers (the table of jobs/s, p99 and ratios against gearmand;
# the durable table against beanstalkd, issue 17) and the plots
# docs/img/peers.png and docs/img/peers-durable.png (gnuplot, from
# gnuplot-nox); a table whose rows are not in the results is left out, with
# its plot. Nothing else in the file is touched.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--run" ]]; then
  bench/peers/run.sh "${2:-}"
fi

results="bench/results/peers.json"
doc="docs/benchmarks.md"
png="docs/img/peers.png"
dpng="docs/img/peers-durable.png"
if [[ ! -s "$results" ]]; then
  echo "bench-report: no $results; measure first with bench/peers/run.sh" \
    "(or scripts/bench-report.sh --run)" >&2
  exit 1
fi
command -v gnuplot >/dev/null || {
  echo "bench-report: gnuplot is not installed; run scripts/install-deps.sh peers" >&2
  exit 1
}
mkdir -p "$(dirname "$png")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 - "$results" "$doc" "$work/peers.dat" "$work/durable.dat" <<'EOF'
import json, sys
results_path, doc_path, dat_path, ddat_path = sys.argv[1:5]
data = json.load(open(results_path))
meta, rows = data["meta"], data["results"]
by = {(r["system"], r["case"]): r for r in rows}
cases = [("sequential", "sequential (1 in flight)"),
         ("inflight_1000", "1,000 in flight"),
         ("batch_1000", "1,000 in flight, batch"),
         ("stream_1000", "1,000 in flight, stream")]

def ms(us):
    return f"{us / 1000:.2f}"

def rate(r):
    return f"{r['jobs_per_s']:,.0f}"

lines = []
# The gearmand table, when its rows were measured (not with PEERS_ONLY=durable).
if any(s == "gearmand" or (s == "tpoold" and c in dict(cases)) for s, c in by):
    lines.append("| case | system | jobs | jobs/s | p50 ms | p99 ms | errors | jobs/s vs gearmand | p99 vs gearmand |")
    lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
with open(dat_path, "w") as dat:
    dat.write("# case gearmand_jobs_s tpoold_jobs_s gearmand_p99_ms tpoold_p99_ms\n")
    for key, title in cases:
        # batch and stream are tpoold modes; gearmand's counterpart is its
        # own 1,000-in-flight run.
        gkey = "sequential" if key == "sequential" else "inflight_1000"
        g, t = by.get(("gearmand", gkey)), by.get(("tpoold", key))
        if t is None:
            continue
        errs = lambda r: sum(r["errors"].values())
        if key in ("sequential", "inflight_1000") and g is not None:
            lines.append(f"| {title} | gearmand | {g['jobs']:,} | {rate(g)} | "
                         f"{ms(g['latency_us']['p50'])} | {ms(g['latency_us']['p99'])} | "
                         f"{errs(g)} | 1.00x | 1.00x |")
        if g is not None:
            speed = t["jobs_per_s"] / g["jobs_per_s"]
            p99 = t["latency_us"]["p99"] / max(1, g["latency_us"]["p99"])
            ratio = f"{speed:.2f}x | {p99:.2f}x"
        else:
            ratio = "n/a | n/a"
        lines.append(f"| {title} | tpoold | {t['jobs']:,} | {rate(t)} | "
                     f"{ms(t['latency_us']['p50'])} | {ms(t['latency_us']['p99'])} | "
                     f"{errs(t)} | {ratio} |")
        label = title.replace(" (1 in flight)", "").replace("1,000 in flight", "1000 in flight")
        label = label.replace(", ", "\\n")
        gj = g["jobs_per_s"] if g else 0
        gp = g["latency_us"]["p99"] / 1000 if g else 0
        dat.write(f"\"{label}\" {gj:.1f} {t['jobs_per_s']:.1f} {gp:.3f} "
                  f"{t['latency_us']['p99'] / 1000:.3f}\n")

# The durable rows (issue 17): beanstalkd -b DIR -f 0 and tpoold with its store.
def num(v, fmt="{:,.2f}"):
    return "n/a" if v is None else fmt.format(v)

def store(r, key):
    s = r.get("store") if r else None
    return s.get(key) if s else None

dlines = []
plot_rows = []
if any(k[0] == "beanstalkd" or k[1].startswith("durable_") for k in by):
    dlines.append("| batch | case | system | jobs | jobs/s | p50 ms | p99 ms | errors | "
                  "fsyncs / 1,000 jobs | commit p50 ms | commit p99 ms | durable / non-durable | "
                  "durable vs beanstalkd |")
    dlines.append("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    errs = lambda r: sum(r["errors"].values())
    for b in (1, 100, 1000):
        bkey = "durable_sequential" if b == 1 else "durable_pipelined_100"
        bean = by.get(("beanstalkd", bkey))
        fs = None
        if bean is not None:
            fs = bean.get("binlog_records_written")
            fs = fs * 1000 / bean["jobs"] if fs is not None and bean["jobs"] else None
        if bean is not None and b in (1, 100):
            title = "one at a time" if b == 1 else "pipelined, windows of 100"
            dlines.append(f"| {b:,} | put + reserve + delete, {title} | beanstalkd -f 0 | "
                          f"{bean['jobs']:,} | {rate(bean)} | {ms(bean['latency_us']['p50'])} | "
                          f"{ms(bean['latency_us']['p99'])} | {errs(bean)} | {num(fs, '{:,.0f}')} | "
                          "n/a | n/a | | 1.00x |")
        modes = [("batch", f"SubmitBatch of {b:,} + Wait"), ("stream", f"Stream, messages of {b:,}")]
        if b == 1:
            modes.append(("unary", "Execute, one call at a time"))
        for mode, title in modes:
            nd, d = by.get(("tpoold", f"nondurable_{mode}_{b}")), by.get(("tpoold", f"durable_{mode}_{b}"))
            for r, system in ((nd, "tpoold"), (d, "tpoold --durable")):
                if r is None:
                    continue
                ratio = vs = ""
                if r is d:
                    ratio = f"{d['jobs_per_s'] / nd['jobs_per_s']:.2f}x" if nd else "n/a"
                    vs = f"{d['jobs_per_s'] / bean['jobs_per_s']:.2f}x" if bean else "n/a"
                dlines.append(f"| {b:,} | {title} | {system} | {r['jobs']:,} | {rate(r)} | "
                              f"{ms(r['latency_us']['p50'])} | {ms(r['latency_us']['p99'])} | "
                              f"{errs(r)} | {num(store(r, 'fsyncs_per_1000_jobs'))} | "
                              f"{num(store(r, 'commit_p50_ms'))} | {num(store(r, 'commit_p99_ms'))} | "
                              f"{ratio} | {vs} |")
            if nd or d:
                near = bean is not None and b in (1, 100)  # beanstalkd bars at 1 and 100 only
                plot_rows.append((f"{mode}\\n{b}", bean["jobs_per_s"] if near else None,
                                  nd["jobs_per_s"] if nd else None, d["jobs_per_s"] if d else None,
                                  store(d, "fsyncs_per_1000_jobs"), fs if near else None))
with open(ddat_path, "w") as dat:
    dat.write("# case beanstalkd_jobs_s tpoold_jobs_s tpoold_durable_jobs_s "
              "tpoold_durable_fsyncs_per_1000 beanstalkd_fsyncs_per_1000\n")
    for row in plot_rows:
        dat.write(" ".join(f'"{v}"' if i == 0 else ("?" if v is None else f"{v:.2f}")
                           for i, v in enumerate(row)) + "\n")

payload = rows[0].get("payload_bytes", "?") if rows else "?"
section = [
    "<!-- peers:begin (generated by scripts/bench-report.sh from bench/results/peers.json; edit the script, not this block) -->",
    f"Measured {meta['date']} on {meta['cores']} cores (load average after the run: "
    f"{meta['load_after']}), payload {payload} bytes, everything on 127.0.0.1.",
]
if lines:
    section += [
        "Ratios: tpoold / gearmand, so jobs/s above 1.00x and p99 below 1.00x favour tpoold; "
        "the batch and stream rows compare with gearmand's 1,000-in-flight run.",
        "",
        *lines,
        "",
        "![jobs/s and p99 latency, gearmand vs tpoold](img/peers.png)",
    ]
if dlines:
    section += [
        "",
        "**Durable** (issue 17): beanstalkd with its binlog and an fsync after every write "
        "(`-b DIR -f 0`) against one tpoold with the durable store, same run; one batch (one "
        "window for beanstalkd) in flight at a time. fsyncs per 1,000 jobs: tpoold's commits "
        "(`tpoold_store_jobs_per_commit_count`, one fsync each) over the run; beanstalkd's binlog "
        "records (`stats` binlog-records-written, one fsync each with -f 0). Commit p50/p99: "
        "`tpoold_store_commit_duration_seconds` over the run, at its buckets' resolution. "
        "Durable vs beanstalkd: against its one-at-a-time run for batch 1, its pipelined "
        "100 for batches of 100 and 1,000. Targets: durable / non-durable >= 0.5x at 100; "
        "durable vs beanstalkd >= 10x at 100 and >= 1x at 1.",
        "",
        *dlines,
        "",
        "![durable jobs/s and fsyncs per 1,000 jobs, beanstalkd vs tpoold](img/peers-durable.png)",
    ]
section.append("<!-- peers:end -->")
fsyncs = any(row[4] is not None or row[5] is not None for row in plot_rows)
open(dat_path + ".plots", "w").write(("peers\n" if lines else "") + ("durable\n" if plot_rows else "") +
                                     ("durable_fsyncs\n" if fsyncs else ""))
try:
    doc = open(doc_path).read()
except FileNotFoundError:
    doc = "# Benchmarks\n"
begin, end = doc.find("<!-- peers:begin"), doc.find("<!-- peers:end -->")
block = "\n".join(section)
if begin >= 0 and end > begin:
    doc = doc[:begin] + block + doc[end + len("<!-- peers:end -->"):]
else:
    doc = doc.rstrip("\n") + "\n\n" + block + "\n"
open(doc_path, "w").write(doc)
EOF

if grep -qx peers "$work/peers.dat.plots"; then
gnuplot <<EOF
set terminal pngcairo size 1100,460 font "sans,10" noenhanced
set output "$png"
set multiplot layout 1,2 title "tpoold (echo plugin) vs gearmand (2 workers, no-op), loopback"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set bmargin 4
set grid ytics
set key top left
set xtics font ",9"
set logscale y
set title "throughput (jobs/s, higher is better)"
plot "$work/peers.dat" using 2:xtic(1) title "gearmand" lc rgb "#999999", \
     "" using 3 title "tpoold" lc rgb "#1f77b4"
set title "p99 latency (ms, lower is better)"
plot "$work/peers.dat" using 4:xtic(1) title "gearmand" lc rgb "#999999", \
     "" using 5 title "tpoold" lc rgb "#1f77b4"
unset multiplot
EOF
fi
if grep -qx durable "$work/peers.dat.plots"; then
# The fsyncs panel only when some run counted them (a store and its metrics).
panels=1
grep -qx durable_fsyncs "$work/peers.dat.plots" && panels=2
gnuplot <<EOF
set terminal pngcairo size $((550 * panels)),460 font "sans,10" noenhanced
set output "$dpng"
set multiplot layout 1,$panels title "durable jobs: beanstalkd (-b DIR -f 0) vs tpoold (echo) with and without --durable, loopback"
set datafile missing "?"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set bmargin 4
set grid ytics
set key top left
set xtics font ",9"
set logscale y
set title "throughput (jobs/s, higher is better)"
plot "$work/durable.dat" using 2:xtic(1) title "beanstalkd -f 0" lc rgb "#999999", \
     "" using 3 title "tpoold" lc rgb "#aec7e8", \
     "" using 4 title "tpoold --durable" lc rgb "#1f77b4"
if ($panels == 2) {
  set title "fsyncs per 1,000 jobs (lower is better)"
  plot "$work/durable.dat" using 6:xtic(1) title "beanstalkd -f 0" lc rgb "#999999", \
       "" using 5 title "tpoold --durable" lc rgb "#1f77b4"
}
unset multiplot
EOF
fi
wrote=()
grep -qx peers "$work/peers.dat.plots" && wrote+=("$png")
grep -qx durable "$work/peers.dat.plots" && wrote+=("$dpng")
echo "bench-report: wrote $doc (Peers) and ${wrote[*]:-no plot} from $results"
