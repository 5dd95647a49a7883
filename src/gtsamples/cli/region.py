"""``gtsamples region {info,read,build,gc}``: the region commands (rows of the command table)."""

from __future__ import annotations

import json
import sys

from ..backends import DEVICES
from .common import (
    Command,
    add_compression_args,
    add_output_args,
    add_selection_args,
    check_output,
    column_list,
    compression_kw,
    progress_enabled,
    region_planned_rows,
    time_range,
    write_stream,
)


def _storage_options(args):
    so = getattr(args, "storage_options", None)
    if not so:
        return None
    try:
        v = json.loads(so)
    except ValueError as e:
        raise ValueError(f"--storage-options must be a JSON object: {e}") from None
    if not isinstance(v, dict):
        raise ValueError("--storage-options must be a JSON object")
    return v


def _open(args):
    from ..region import open_region

    return open_region(args.root, args.region_id, _storage_options(args))


def cmd_info(args) -> int:
    region = _open(args)
    info = region.info()
    if args.json:
        print(json.dumps(info, indent=1))
        return 0
    print(f"region {info['region_id']} at {info['root']}: catalog version {info['catalog_version']} "
          f"({info['operation']} at {info['created_at']})")
    s = info["schema"]
    if s is not None:
        t = s["timestamp"]
        print(f"  timestamp {t['name']} ({t['unit']}, id {t['column_id']}); fields "
              + ", ".join(f"{f['name']} (id {f['column_id']})" for f in s["fields"]))
    print(f"  {info['ssts']} SSTs, {info['rows']:,} rows, {info['sst_bytes']:,} bytes; "
          f"{info['covered_ssts']} covered by artifacts ({info['covered_rows']:,} rows, {info['artifact_bytes']:,} bytes)")
    stats = {f.file_id: f.stats for f in region.ssts}  # None for an empty SST
    known = [st for st in stats.values() if st]
    if s is not None and known:
        lo, hi = min(st["min_timestamp"] for st in known), max(st["max_timestamp"] for st in known)
        print(f"  time {time_range(lo, hi, s['timestamp']['unit'])}")
    for f in info["files"]:
        gen = f["generation"] or "-"
        print(f"  {f['file_id']}  rows {f['rows']:>12,}  size {f['size']:>14,}  artifact {gen}  {f['path']}")
        st = stats.get(f["file_id"])
        if s is not None and st:
            print(f"    time {time_range(st['min_timestamp'], st['max_timestamp'], s['timestamp']['unit'])}")
    return 0


def cmd_read(args) -> int:
    import warnings

    from ..errors import ArtifactSkippedWarning

    check_output(args.output)
    columns = column_list(args.columns)
    region = _open(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ArtifactSkippedWarning)
        try:
            batches = region.iter_batches(columns=columns, series=args.series, tables=args.table, start=args.start,
                                          end=args.end, device=args.device, dedup=args.dedup, strict=args.strict,
                                          max_bytes=args.max_bytes)
            progress = progress_enabled(args)
            total = None
            if progress and not args.dedup:  # dedup drops rows: the plan's count is no total
                plan = region.plan(columns=columns, series=args.series, tables=args.table, start=args.start,
                                   end=args.end)
                total = region_planned_rows(region, plan)
            rows, _ = write_stream(batches, args.output, progress, total=total)
        finally:
            for w in caught:
                print(f"warning: {w.message}", file=sys.stderr)
    stats = region.last_stats
    print(f"{rows:,} rows -> {args.output} ({stats.requests} requests, {stats.bytes_read:,} bytes read, "
          f"{stats.metadata_bytes:,} metadata bytes, {stats.cache_hits} cache hits)", file=sys.stderr)
    return 0


def cmd_build(args) -> int:
    region = _open(args)
    entries = region.build(missing_only=not args.all, workers=args.workers, executor=args.executor,
                           verify=None if args.verify == "none" else args.verify, **compression_kw(args))
    for e in entries:
        print(f"built {e.file_id} generation {e.generation} ({e.file_size:,} bytes)")
    print(f"published {len(entries)} artifact(s) in catalog version {region.version}")
    return 0


def cmd_gc(args) -> int:
    region = _open(args)
    out = region.gc(grace_seconds=args.grace, expire_versions=args.expire_versions, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    verb = "would remove" if args.dry_run else "removed"
    for k in ("removed_generations", "removed_ssts", "removed_tmp"):
        for p in out[k]:
            print(f"{verb} {p}")
    if out["expired_versions"]:
        print(f"{'would expire' if args.dry_run else 'expired'} catalog versions {out['expired_versions']}")
    print(f"{len(out['removed_generations'])} generation(s), {len(out['removed_ssts'])} SST file(s), "
          f"{len(out['removed_tmp'])} temporary file(s)")
    return 0


def _common(sp) -> None:
    sp.add_argument("root", help="store root (directory or fsspec URL) holding <region_id>/")
    sp.add_argument("region_id", type=int)
    sp.add_argument("--storage-options", help="fsspec storage options as a JSON object")


def _info_args(sp) -> None:
    _common(sp)
    sp.add_argument("--json", action="store_true")


def _read_args(sp) -> None:
    _common(sp)
    add_selection_args(sp, "region")
    sp.add_argument("--dedup", action="store_true", help="last-write-wins view (deletes dropped)")
    sp.add_argument("--strict", action="store_true", help="fail instead of skipping unusable artifacts")
    sp.add_argument("--device", choices=DEVICES, default="cpu", help="decode on the cpu (default), gpu or auto")
    add_output_args(sp)


def _build_args(sp) -> None:
    _common(sp)
    sp.add_argument("--workers", type=int, default=1, metavar="N", help="builds at once (default 1)")
    sp.add_argument("--executor", choices=("thread", "process"), default="thread",
                    help="run the builds on threads (default) or processes")
    sp.add_argument("--all", action="store_true", help="rebuild every SST, not only the uncovered ones")
    sp.add_argument("--verify", choices=("inspect", "validate", "none"), default="inspect",
                    help="check each new artifact before publishing: inspect (default: headers, trailers, pages), "
                         "validate (every chunk decoded) or none")
    add_compression_args(sp)


def _gc_args(sp) -> None:
    _common(sp)
    sp.add_argument("--grace", type=float, default=3600.0, metavar="SECONDS",
                    help="remove only what is older than this (default 3600; inf removes nothing)")
    sp.add_argument("--expire-versions", action="store_true",
                    help="first delete catalog versions (never the latest) older than the grace period")
    sp.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    sp.add_argument("--json", action="store_true", help="print what was removed as JSON")


COMMANDS = (
    Command("info", "catalog version, SSTs, coverage", cmd_info, _info_args),
    Command("read", "read a selection across the region to .parquet, .arrow or .csv (streamed)", cmd_read,
            _read_args),
    Command("build", "build artifacts for uncovered SSTs, publish them in one commit", cmd_build, _build_args),
    Command("gc", "remove unreferenced generations older than the grace period", cmd_gc, _gc_args),
)
