"""The artifact commands: ``inspect``, ``validate``, ``read``, ``build``, ``demo``, ``warmup``."""

from __future__ import annotations

import json
import sys

from ..backends import DEVICES
from ..errors import SamplesError
from .common import (
    Command,
    add_compression_args,
    add_output_args,
    add_selection_args,
    artifact_planned_rows,
    check_output,
    column_list,
    compression_kw,
    os_message,
    positive_count,
    progress_enabled,
    time_range,
    write_stream,
)


def _open(args):
    from ..artifact import open_artifact

    entry = None
    if getattr(args, "entry", None):
        try:
            with open(args.entry, "rb") as f:
                entry = json.loads(f.read())
        except OSError as e:
            raise ValueError(f"--entry {args.entry}: {os_message(e).removeprefix(f'{args.entry}: ')}") from None
        except ValueError as e:  # not UTF-8, not JSON
            raise ValueError(f"--entry {args.entry}: not a JSON catalog entry ({e})") from None
    return open_artifact(args.path, entry=entry)


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
    check_output(args.output)
    columns = column_list(args.columns)
    art = _open(args)
    batches = art.iter_batches(columns=columns, series=args.series or None, tables=args.table or None,
                               start=args.start, end=args.end, device=args.device, max_bytes=args.max_bytes)
    progress = progress_enabled(args)
    total = artifact_planned_rows(art, args.series or None, args.table or None, args.start, args.end) if progress \
        else None
    rows, _ = write_stream(batches, args.output, progress, total=total)
    stats = art.last_stats
    print(f"{rows:,} rows -> {args.output} ({stats.requests} requests, {stats.bytes_read:,} bytes read, "
          f"{stats.blocks_decoded:,} blocks decoded)", file=sys.stderr)
    return 0


def cmd_build(args) -> int:
    from ..write import write_artifact_from_parquet

    kw = dict(region_id=args.region_id, file_id=args.file_id, generation=args.generation, row_limit=args.row_limit,
              **compression_kw(args))
    if progress_enabled(args):
        from tqdm import tqdm

        with tqdm(total=1, desc="building", unit="artifact", file=sys.stderr) as bar:
            entry = write_artifact_from_parquet(args.source, args.out_dir, **kw)
            bar.update(1)
    else:
        entry = write_artifact_from_parquet(args.source, args.out_dir, **kw)
    print(json.dumps(entry.to_dict(), indent=1))
    return 0


def cmd_demo(args) -> int:
    from .. import demo

    demo.run(n_series=args.series, rows_per_series=args.rows_per_series, device=args.device)
    return 0


def _path_args(sp) -> None:
    sp.add_argument("path", help="a generation directory (holding manifest.json), or a store root with --entry")
    sp.add_argument("--entry", help="catalog entry JSON file; PATH is then the store root")


def _inspect_args(sp) -> None:
    _path_args(sp)
    sp.add_argument("--json", action="store_true", help="print the summary as JSON")


def _read_args(sp) -> None:
    _path_args(sp)
    add_selection_args(sp)
    sp.add_argument("--device", choices=DEVICES, default="cpu", help="decode on the cpu (default), gpu or auto")
    add_output_args(sp)


def _build_args(sp) -> None:
    sp.add_argument("source", help="SRC.parquet")
    sp.add_argument("out_dir", help="store root; writes <region_id>/samples/<file_id>/<generation>/")
    sp.add_argument("--region-id", type=int, required=True)
    sp.add_argument("--file-id", required=True, help="source SST FileId (lowercase UUID)")
    sp.add_argument("--generation", help="FileId of this build (default: a new UUID)")
    sp.add_argument("--row-limit", type=int, default=8192)
    add_compression_args(sp)
    sp.add_argument("--no-progress", action="store_true")


def _demo_args(sp) -> None:
    sp.add_argument("--series", type=positive_count, default=500, metavar="N", help="series (default 500)")
    sp.add_argument("--rows-per-series", type=positive_count, default=4000, metavar="N",
                    help="rows of each series (default 4000)")
    sp.add_argument("--device", choices=DEVICES, default="auto")


def _warmup_args(sp) -> None:
    sp.add_argument("--portable", action="store_true",
                    help="for the portable CPU targets (x86-64-v3, generic), not this CPU: for images")


def cmd_warmup(args) -> int:
    from ..warmup import run

    return run(portable=args.portable)


COMMANDS = (
    Command("inspect", "manifest, parts, depth, blocks, encodings, compression ratio", cmd_inspect, _inspect_args),
    Command("validate", "deep check: every page and chunk decoded (exit 0 valid, 1 invalid)", cmd_validate,
            _path_args),
    Command("read", "read a selection to .parquet, .arrow or .csv (streamed)", cmd_read, _read_args),
    Command("build", "build an artifact from a Parquet SST in spec order", cmd_build, _build_args),
    Command("demo", "build a synthetic artifact, read it back, print throughput", cmd_demo, _demo_args),
    Command("warmup", "compile the CPU kernels into the install's cache (once, at install time)", cmd_warmup,
            _warmup_args),
)
