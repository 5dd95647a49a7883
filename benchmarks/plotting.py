"""PNG plots of the benchmark scripts' JSON (matplotlib: the ``plots`` extra).

    python benchmarks/plotting.py cpu    CPU.json    [-o benchmarks/plots]   # bench_cpu.py --json
    python benchmarks/plotting.py region REGION.json [-o benchmarks/plots]   # bench_region.py --json
    python benchmarks/plotting.py gpu    GPU.jsonl   [-o benchmarks/plots]   # bench_gpu.py --json

or ``--plot DIR`` on the scripts themselves.  Each kind writes two figures:

* ``cpu``: ``cpu_throughput.png`` (full-scan rows/s and the one-series query
  time against size, gtsamples and pyarrow side by side; needs ``--sizes``) and
  ``cpu_stages.png`` (where a full read's time goes, ns per row, per size);
* ``region``: ``region_times.png`` (cold, warm, no-artifact and pyarrow query
  times) and ``region_stages.png`` (the cold and warm query's stages);
* ``gpu``: ``gpu_throughput.png`` (GB/s against rows) and ``gpu_stages.png``
  (device stages by CUDA events, host stages of the reading thread); from a
  ``--dry-run`` only the host path and the CPU backend, and the titles say so.

Every figure carries a footer naming the script, the commit, the machine and
the load average (``run_info``), as RESULTS.md reports them.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
DPI = 100
# one colour per stage name, whatever figure it is in
_STAGE_COLORS: dict[str, str] = {}
_PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
            "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#a0cbe8", "#ffbe7d"]


def run_info() -> dict:
    """What a measurement needs beside it: machine, interpreter, commit, load averages now."""
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "commit": commit, "dirty": dirty, "load_avg": [round(x, 2) for x in os.getloadavg()]}


def load(path) -> dict | list[dict]:
    """A JSON document (bench_cpu, bench_region) or JSON lines, one record each (bench_gpu)."""
    text = pathlib.Path(path).read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]


# ----------------------------------------------------------------------------- figure helpers


def _figure(ncols: int, width: float = 11.0, height: float = 4.2):
    from matplotlib.figure import Figure  # no pyplot: no backend, no global state

    fig = Figure(figsize=(width, height), dpi=DPI)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, axes


def _footer(fig, script: str, info: dict | None) -> None:
    parts = [script]
    if info:
        commit = info.get("commit") or "?"
        parts.append(f"commit {commit}{' (modified)' if info.get('dirty') else ''}")
        parts.append(f"{info.get('machine', '?')}, {info.get('cpus', '?')} CPUs, Python {info.get('python', '?')}")
        loads = [x for x in (info.get("load_avg_start"), info.get("load_avg_end"), info.get("load_avg")) if x]
        if loads:
            parts.append("load avg (1 min) " + " -> ".join(f"{x[0]:.1f}" for x in loads))
    fig.text(0.01, 0.01, " | ".join(parts), fontsize=7, color="0.35", ha="left", va="bottom")


def _save(fig, out_dir, name: str) -> pathlib.Path:
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=DPI)
    return path


def stage_color(name: str) -> str:
    if name not in _STAGE_COLORS:
        _STAGE_COLORS[name] = _PALETTE[len(_STAGE_COLORS) % len(_PALETTE)]
    return _STAGE_COLORS[name]


def stacked_bars(ax, labels: list[str], bars: list[dict[str, float]], unit: str) -> None:
    """Horizontal bars, one per label, each stacked from its stages (in first-seen order)."""
    names: list[str] = []
    for b in bars:
        names += [k for k in b if k not in names]
    left = [0.0] * len(bars)
    ys = list(range(len(bars)))[::-1]
    for name in names:
        widths = [max(0.0, float(b.get(name, 0.0))) for b in bars]
        if not any(widths):
            continue
        ax.barh(ys, widths, left=left, color=stage_color(name), label=name, height=0.6)
        left = [a + w for a, w in zip(left, widths)]
    ax.set_yticks(ys, labels)
    ax.set_xlabel(unit)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="x", alpha=0.3)


def _plain_log(axis) -> None:
    """Log-scale ticks written as plain numbers (3, 10, 30), not powers of ten."""
    from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(StrMethodFormatter("{x:g}"))
    axis.set_minor_formatter(NullFormatter())


def _rows_label(n: float, _pos=None) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}"


def _rows_axis(axis) -> None:
    """A log axis of row counts labelled 10k, 1M, ..."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(_rows_label))
    axis.set_minor_formatter(NullFormatter())


# ----------------------------------------------------------------------------- bench_cpu


def plot_cpu(doc: dict, out_dir) -> list[pathlib.Path]:
    runs = sorted(doc["runs"], key=lambda r: r["rows"])
    info, script = doc.get("info"), "bench_cpu.py " + doc.get("command", "")
    rows = [r["rows"] for r in runs]
    fig, (ax, aq) = _figure(2)
    for who, color in (("gtsamples", "#4e79a7"), ("pyarrow", "#f28e2b")):
        best = [r["rows"] / r["full_scan"][f"{who}_best_s"] / 1e6 for r in runs]
        med = [r["rows"] / r["full_scan"][f"{who}_median_s"] / 1e6 for r in runs]
        ax.plot(rows, best, "o-", color=color, label=f"{who}, best of {runs[0].get('repeat', '?')}")
        ax.plot(rows, med, "o--", color=color, alpha=0.6, label=f"{who}, median")
        aq.plot(rows, [r["one_series"][f"{who}_best_s"] * 1e3 for r in runs], "o-", color=color, label=who)
    ax.set_xscale("log")
    _rows_axis(ax.xaxis)
    ax.set_xlabel("rows in the file")
    ax.set_ylabel("M rows/s")
    ax.set_ylim(bottom=0)
    ax.set_title("full scan: artifact read vs Parquet (pyarrow)", fontsize=10)
    aq.set_xscale("log")
    aq.set_yscale("log")
    _rows_axis(aq.xaxis)
    _plain_log(aq.yaxis)
    aq.set_xlabel("rows in the file")
    aq.set_ylabel("ms (best)")
    aq.set_title("one series, 1% of its time range", fontsize=10)
    for a in (ax, aq):
        a.grid(alpha=0.3, which="both")
        a.legend(fontsize=8)
    _footer(fig, script, info)
    paths = [_save(fig, out_dir, "cpu_throughput.png")]

    fig, (ax,) = _figure(1, height=1.6 + 0.55 * len(runs))
    bars = [cpu_stage_bar(r) for r in runs]
    stacked_bars(ax, [f"{_rows_label(r['rows'])} rows" for r in runs], bars, "ns per row (full read, fastest repeat)")
    ax.set_title("where a full read's time goes (decode split by the threads' CPU time in Zstd and kernels)",
                 fontsize=10)
    _footer(fig, script, info)
    paths.append(_save(fig, out_dir, "cpu_stages.png"))
    return paths


def cpu_stage_bar(run: dict) -> dict[str, float]:
    """A full read's wall time per stage, ns per row: the decoder's stages
    (``cpu.last_stats()``), its decode stage split in proportion to the threads'
    CPU seconds in Zstd and in the kernels, and the rest of ``Artifact.read``
    (planning, fetch, Arrow assembly)."""
    s, n = run["stages_s"], run["rows"]
    cpu = s.get("decompress", 0.0) + s.get("kernel", 0.0)
    zstd_share = s.get("decompress", 0.0) / cpu if cpu > 0 else 0.5
    ns = 1e9 / n
    return {
        "plan, fetch, Arrow": max(0.0, s["read_wall"] - s["total"]) * ns,
        "prepare": s["prepare"] * ns,
        # (older runs timed the checksum and frame check stages apart; now they count in Zstd)
        "checksums": s.get("checksum", 0.0) * ns,
        "frame check": s.get("frame_check", 0.0) * ns,
        "decode: Zstd": s["decode"] * zstd_share * ns,
        "decode: kernels": s["decode"] * (1 - zstd_share) * ns,
        "finish (validity)": s["finish"] * ns,
    }


# ----------------------------------------------------------------------------- bench_region


def plot_region(doc: dict, out_dir) -> list[pathlib.Path]:
    info, script = doc.get("info"), "bench_region.py " + doc.get("command", "")
    fig, (ax,) = _figure(1, height=3.2)
    what = [("cold query (artifacts)", doc["cold"]["seconds"]), ("warm query (pages cached)", doc["warm"]["seconds"]),
            ("region without artifacts (SST scan)", doc["region_scan_no_artifacts_seconds"]),
            ("pyarrow.dataset scan, same filter", doc["pyarrow_scan_seconds"])]
    ys = list(range(len(what)))[::-1]
    ax.barh(ys, [v * 1e3 for _, v in what], color=["#4e79a7", "#76b7b2", "#bab0ac", "#f28e2b"], height=0.6)
    for y, (_, v) in zip(ys, what):
        ax.text(v * 1e3 * 1.08, y, f"{v * 1e3:,.1f} ms", va="center", fontsize=8)
    ax.set_yticks(ys, [w for w, _ in what])
    ax.set_xscale("log")
    _plain_log(ax.xaxis)
    ax.set_xlim(right=max(v for _, v in what) * 1e3 * 4)
    ax.set_xlabel("ms, median (log scale)")
    ax.set_title(f"one series over {doc['ssts']} SSTs ({doc['rows']:,} rows; {doc['rows_out']:,} returned): "
                 f"cold {doc['speedup_cold']}x, warm {doc['speedup_warm']}x pyarrow", fontsize=10)
    ax.grid(axis="x", alpha=0.3, which="both")
    _footer(fig, script, info)
    paths = [_save(fig, out_dir, "region_times.png")]

    stages = doc.get("stages_ms")
    if stages:
        fig, (ax,) = _figure(1, height=2.8)
        stacked_bars(ax, [f"{k}: {stages[k]['wall']:.1f} ms" for k in ("cold", "warm")],
                     [{n: v for n, v in stages[k].items() if n not in ("wall", "n")} for k in ("cold", "warm")],
                     "ms")
        n = stages["cold"].get("n", "?")
        ax.set_title(f"where the region query's time goes (the median query of {n} cold and of {n} warm, "
                     f"timed apart from the measures above)", fontsize=10)
        _footer(fig, script, info)
        paths.append(_save(fig, out_dir, "region_stages.png"))
    return paths


# ----------------------------------------------------------------------------- bench_gpu

# device stages: consecutive CUDA event intervals, adding up to total_device
GPU_DEVICE_STAGES = ("h2d", "upload", "hash", "nvcomp", "decode", "trim", "compact", "assembly")


def plot_gpu(records: list[dict], out_dir) -> list[pathlib.Path]:
    records = [records] if isinstance(records, dict) else list(records)
    files = sorted((r for r in records if r.get("query") == "files"), key=lambda r: r["rows"])
    scans = sorted((r for r in records if r.get("query") == "scan"), key=lambda r: (r["fields"], r["rows"]))
    dry = any(r.get("dry_run") for r in files) or not any("device_GBps" in r for r in records)
    note = " (dry run: no GPU; host path and CPU backend only)" if dry else ""
    script = "bench_gpu.py" + (" --dry-run" if dry else "")

    fig, (ax,) = _figure(1, width=9)
    series = [("files -> DeviceTable", files, "files_GBps", "o-"),
              ("host path alone (NullDevice)", files, "host_path_GBps", "o-"),
              ("HBM -> columns (same batch)", files, "device_GBps", "s--"),
              ("CPU backend, Artifact.read()", files, "cpu_files_GBps", "o-")]
    for nf in sorted({r["fields"] for r in scans}):
        sc = [r for r in scans if r["fields"] == nf]
        series += [(f"scan batch, {nf} fields: device", sc, "device_GBps", "^:"),
                   (f"scan batch, {nf} fields: CPU decode", sc, "cpu_GBps", "v:"),
                   (f"scan batch, {nf} fields: D2D copy ceiling", sc, "copy_out_GBps", "x:")]
    for label, recs, key, style in series:
        pts = [(r["batch_rows"], r[key]) for r in recs if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
        if pts:
            ax.plot(*zip(*pts), style, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _rows_axis(ax.xaxis)
    _plain_log(ax.yaxis)
    ax.set_xlabel("rows")
    ax.set_ylabel("GB/s of decoded output")
    ax.set_title("GPU read throughput" + note, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    _footer(fig, script, None)
    paths = [_save(fig, out_dir, "gpu_throughput.png")]

    labels, bars = [], []
    for r in files:
        stages = r.get("stages_ms") or r.get("host_path_stages_ms") or {}
        dev = {k: stages[k] for k in GPU_DEVICE_STAGES if k in stages}
        if dev:
            labels.append(f"{_rows_label(r['batch_rows'])} rows: device")
            bars.append(dev)
        host = {k: v for k, v in stages.items() if k.startswith("host_") or k == "navigate"}
        if host:
            labels.append(f"{_rows_label(r['batch_rows'])} rows: host thread")
            bars.append(host)
    fig, (ax,) = _figure(1, height=1.6 + 0.45 * max(1, len(bars)))
    if bars:
        stacked_bars(ax, labels, bars, "ms")
    ax.set_title("files -> DeviceTable stages: device by CUDA events, host thread beside it (they overlap)"
                 + note, fontsize=9)
    _footer(fig, script, None)
    paths.append(_save(fig, out_dir, "gpu_stages.png"))
    return paths


PLOTTERS = {"cpu": plot_cpu, "region": plot_region, "gpu": plot_gpu}


def render(kind: str, data, out_dir) -> list[pathlib.Path]:
    """The figures of one benchmark's JSON (a document or the records), written to ``out_dir``."""
    return PLOTTERS[kind](data, out_dir)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=sorted(PLOTTERS))
    ap.add_argument("json", help="the script's --json output")
    ap.add_argument("-o", "--out", default=str(ROOT / "benchmarks" / "plots"), help="folder for the PNGs")
    args = ap.parse_args(argv)
    for path in render(args.kind, load(args.json), args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
