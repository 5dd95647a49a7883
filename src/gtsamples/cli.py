"""The ``gtsamples`` command line.

Exit codes: 0 success (for ``validate``: valid), 1 the artifact breaks a rule
(or cannot be read), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .errors import SamplesError


def _series(text: str) -> tuple[int, int]:
    try:
        t, s = text.split(":")
        return int(t, 0), int(s, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--series takes TABLE_ID:TSID, got {text!r}") from None


def _bound(text: str):
    """``--start``/``--end``: an integer in the manifest unit, else an ISO-8601
    date-time, checked here and converted by the reader like any ``start=`` string."""
    try:
        return int(text)
    except ValueError:
        pass
    from .timebounds import parse_iso

    try:
        parse_iso(text, "value")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected an integer in the timestamp unit or an ISO-8601 date-time: "
                                         f"{str(e).removeprefix('value=')}") from None
    return text


def time_range(lo: int, hi: int, unit: str) -> str:
    """``[lo, hi]`` (integers in ``unit``) for people: ISO-8601 UTC date-times, then the raw integers."""
    from .timebounds import format_time

    return f"{format_time(lo, unit)} .. {format_time(hi, unit)}  [{lo}, {hi}] {unit}s"


def add_selection_args(sp, unit_word: str = "manifest") -> None:
    """The selection options shared by `read` and `region read`."""
    sp.add_argument("--series", action="append", type=_series, metavar="TABLE:TSID", help="repeatable")
    sp.add_argument("--table", action="append", type=int, metavar="TABLE_ID", help="repeatable")
    sp.add_argument("--start", type=_bound, help=f"inclusive: an integer in the {unit_word}'s timestamp unit, or an "
                    "ISO-8601 date or date-time (UTC unless it has an offset), e.g. 2024-05-01T00:00Z")
    sp.add_argument("--end", type=_bound, help=f"exclusive: an integer in the {unit_word}'s timestamp unit, or an "
                    "ISO-8601 date or date-time")
    sp.add_argument("--columns", help="comma-separated column names (default: all)")


def _open(args):
    from .artifact import open_artifact

    entry = None
    if getattr(args, "entry", None):
        with open(args.entry) as f:
            entry = json.load(f)
    return open_artifact(args.path, entry=entry)


def _progress_enabled(args) -> bool:
    if getattr(args, "no_progress", False) or not sys.stderr.isatty():
        return False
    try:
        __import__("tqdm")  # importable: progress bars can be shown
    except ImportError:
        return False
    return True


def write_table(table, out: str) -> None:
    """Write a pyarrow Table as .parquet, .arrow/.feather/.ipc or .csv (by extension)."""
    import pyarrow as pa

    ext = os.path.splitext(out)[1].lower()
    if ext == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(table, out, compression="zstd")
    elif ext in (".arrow", ".feather", ".ipc"):
        with pa.OSFile(out, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
    elif ext == ".csv":
        import pyarrow.csv as pcsv

        pcsv.write_csv(table, out)
    else:
        raise ValueError(f"output {out!r}: extension must be .parquet, .arrow or .csv")


def cmd_inspect(args) -> int:
    art = _open(args)
    s = art.inspect()
    if args.json:
        print(json.dumps(s, indent=1, default=str))
        return 0
    m = art.manifest
    print(f"{s['location']}")
    print(f"  format {s['format']} v{s['version']}  region {s['region_id']}  source {s['source_file_id']}  generation {s['generation']}")
    print(f"  timestamp {m.timestamp.name!r} ({m.timestamp.unit}, id {m.timestamp.column_id});  "
          f"{len(m.fields)} field(s): {', '.join(f'{f.name}#{f.column_id}' for f in m.fields[:8])}"
          f"{' ...' if len(m.fields) > 8 else ''}")
    print(f"  {s['rows']:,} rows in {s['blocks']:,} blocks, {len(s['parts'])} part(s), {s['bytes']:,} bytes "
          f"({s['bytes_per_sample']:.2f} bytes/sample);  chunk compression ratio {s['compression_ratio']:.2f}")
    unit = m.timestamp.unit
    if s["parts"]:
        lo, hi = min(p["min_timestamp"] for p in s["parts"]), max(p["max_timestamp"] for p in s["parts"])
        print(f"  time {time_range(lo, hi, unit)}")
    for p in s["parts"]:
        print(f"  part {p['part_id']}: depth {p['depth']}, {p['leaves']} leaf page(s), {p['blocks']:,} blocks, "
              f"{p['rows']:,} rows, ids {tuple(p['first'])}..{tuple(p['last'])}, {p['file_size']:,} bytes "
              f"({p['metadata_bytes']:,} metadata)")
        print(f"    time {time_range(p['min_timestamp'], p['max_timestamp'], unit)}")
    print("  encodings (role:encoding/compression -> chunks):")
    for k, v in s["encodings"].items():
        print(f"    {k:28s} {v:,}")
    return 0


def cmd_validate(args) -> int:
    try:
        art = _open(args)
        r = art.validate()
    except SamplesError as e:
        print(f"INVALID: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"valid: {r['rows']:,} rows, {r['stats']['chunks_decoded']:,} chunks and "
          f"{r['stats']['pages_loaded']:,} pages checked")
    return 0


def cmd_read(args) -> int:
    art = _open(args)
    columns = None
    if args.columns:
        columns = [c for c in args.columns.split(",") if c]
    kw = dict(columns=columns, series=args.series or None, tables=args.table or None,
              start=args.start, end=args.end, device=args.device)
    if _progress_enabled(args):
        from tqdm import tqdm

        with tqdm(total=1, desc="reading", unit="query", file=sys.stderr) as bar:
            table, stats = art.read_with_stats(**kw)
            bar.update(1)
    else:
        table, stats = art.read_with_stats(**kw)
    if not hasattr(table, "schema"):  # cudf.DataFrame
        table = table.to_arrow()
    write_table(table, args.output)
    print(f"{table.num_rows:,} rows -> {args.output} ({stats.requests} requests, {stats.bytes_read:,} bytes read, "
          f"{stats.blocks_decoded:,} blocks decoded)", file=sys.stderr)
    return 0


def cmd_build(args) -> int:
    from .write import write_artifact_from_parquet

    kw = dict(region_id=args.region_id, file_id=args.file_id, generation=args.generation, row_limit=args.row_limit)
    if _progress_enabled(args):
        from tqdm import tqdm

        with tqdm(total=1, desc="building", unit="artifact", file=sys.stderr) as bar:
            entry = write_artifact_from_parquet(args.source, args.out_dir, **kw)
            bar.update(1)
    else:
        entry = write_artifact_from_parquet(args.source, args.out_dir, **kw)
    print(json.dumps(entry.to_dict(), indent=1))
    return 0


def cmd_demo(args) -> int:
    from . import demo

    demo.run(n_series=args.series, rows_per_series=args.rows_per_series, device=args.device)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gtsamples", description="Read, write and check Mito columnar-samples artifacts.")
    sub = p.add_subparsers(dest="command", required=True)

    def add_path(sp):
        sp.add_argument("path", help="a generation directory (holding manifest.json), or a store root with --entry")
        sp.add_argument("--entry", help="catalog entry JSON file; PATH is then the store root")

    sp = sub.add_parser("inspect", help="manifest, parts, depth, blocks, encodings, compression ratio")
    add_path(sp)
    sp.add_argument("--json", action="store_true", help="print the summary as JSON")
    sp.set_defaults(func=cmd_inspect)

    sp = sub.add_parser("validate", help="deep check: every page and chunk decoded (exit 0 valid, 1 invalid)")
    add_path(sp)
    sp.set_defaults(func=cmd_validate)

    sp = sub.add_parser("read", help="read a selection to .parquet, .arrow or .csv")
    add_path(sp)
    add_selection_args(sp)
    sp.add_argument("--device", choices=("cpu", "gpu", "auto"), default="cpu")
    sp.add_argument("--no-progress", action="store_true")
    sp.add_argument("-o", "--output", required=True, help="OUT.parquet | OUT.arrow | OUT.csv")
    sp.set_defaults(func=cmd_read)

    sp = sub.add_parser("build", help="build an artifact from a Parquet SST in spec order")
    sp.add_argument("source", help="SRC.parquet")
    sp.add_argument("out_dir", help="store root; writes <region_id>/samples/<file_id>/<generation>/")
    sp.add_argument("--region-id", type=int, required=True)
    sp.add_argument("--file-id", required=True, help="source SST FileId (lowercase UUID)")
    sp.add_argument("--generation", help="FileId of this build (default: a new UUID)")
    sp.add_argument("--row-limit", type=int, default=8192)
    sp.add_argument("--no-progress", action="store_true")
    sp.set_defaults(func=cmd_build)

    sp = sub.add_parser("demo", help="build a synthetic artifact, read it back, print throughput")
    sp.add_argument("--series", type=int, default=500)
    sp.add_argument("--rows-per-series", type=int, default=4000)
    sp.add_argument("--device", choices=("cpu", "gpu", "auto"), default="auto")
    sp.set_defaults(func=cmd_demo)

    try:
        from .region.cli import add_region_subcommands
    except ImportError:
        pass
    else:
        add_region_subcommands(sub)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on usage errors
        return int(e.code or 0)
    try:
        return int(args.func(args) or 0)
    except SamplesError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
