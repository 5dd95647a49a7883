"""What the commands share: selection options, time ranges for people, and
the streamed output (Parquet, Arrow IPC or CSV written batch by batch, with
an optional tqdm progress bar counting rows and bytes)."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
from typing import Callable

from ..format import constants as C
from ..plan.split import MAX_BYTES_CAP

OUTPUT_EXTENSIONS = (".parquet", ".arrow", ".feather", ".ipc", ".csv")


@dataclasses.dataclass(frozen=True)
class Command:
    """One row of the command table: ``gtsamples NAME`` runs ``run(args)`` (its
    exit code) after ``arguments(subparser)`` declared its options; a command
    with ``subcommands`` is a group (``gtsamples region read``)."""

    name: str
    help: str
    run: Callable | None
    arguments: Callable | None
    subcommands: tuple["Command", ...] = ()


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
    from ..timebounds import parse_iso

    try:
        parse_iso(text, "value")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected an integer in the timestamp unit or an ISO-8601 date-time: "
                                         f"{str(e).removeprefix('value=')}") from None
    return text


def time_range(lo: int, hi: int, unit: str) -> str:
    """``[lo, hi]`` (integers in ``unit``) for people: ISO-8601 UTC date-times, then the raw integers."""
    from ..timebounds import format_time

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


def add_output_args(sp) -> None:
    """``-o``, ``--max-bytes`` and ``--no-progress`` of the reading commands."""
    sp.add_argument("-o", "--output", required=True, help="OUT.parquet | OUT.arrow | OUT.csv")
    sp.add_argument("--max-bytes", type=_max_bytes, default=64 << 20, metavar="N",
                    help="decoded bytes per streamed batch (default 64 MiB; K, M, G suffixes)")
    sp.add_argument("--no-progress", action="store_true")


def add_compression_args(sp) -> None:
    """``--compression`` and ``--compression-level`` of the building commands (``write_artifact``'s)."""
    sp.add_argument("--compression", choices=("zstd", "none"), default="zstd",
                    help="zstd (default): each chunk and page a Zstd frame where smaller; none: all raw, "
                         "more bytes, no decompression")
    sp.add_argument("--compression-level", type=int, default=C.WRITER_ZSTD_LEVEL, metavar="N",
                    help=f"libzstd level, {C.WRITER_ZSTD_MIN_LEVEL}..{C.WRITER_ZSTD_MAX_LEVEL} without 0 (default "
                         f"{C.WRITER_ZSTD_LEVEL}; negative: faster decoding, more bytes)")


def compression_kw(args) -> dict:
    """``write_artifact``'s keywords from :func:`add_compression_args`' options."""
    return {"compression": None if args.compression == "none" else args.compression,
            "compression_level": args.compression_level}


def _max_bytes(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    k = mult.get(t[-1:], 1)
    try:
        n = int(t[:-1] if k > 1 else t) * k
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of bytes (e.g. 65536, 64M), got {text!r}")
    if n > MAX_BYTES_CAP:  # (the readers' cap: their batch sizing is int64 arithmetic)
        raise argparse.ArgumentTypeError(f"at most {MAX_BYTES_CAP >> 30}G (2**62 bytes), got {text!r}")
    return n


def positive_count(text: str) -> int:
    """A count option (``demo --series``): an integer >= 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def column_list(text: str | None) -> list[str] | None:
    """``--columns a,b``: the names, spaces around them dropped; None without the option.
    A list that names no column (``--columns ,``) is an error, not an empty projection."""
    if text is None:
        return None
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise ValueError(f"--columns {text!r} names no column (comma-separated names, e.g. ts,cpu_usage)")
    return names


def os_message(e: OSError) -> str:
    """An OSError as one line naming the path: ``PATH: reason`` (Python's and pyarrow's
    ``FileNotFoundError(path)`` alike)."""
    if e.filename is not None and e.strerror:
        paths = f"{e.filename} -> {e.filename2}" if e.filename2 is not None else f"{e.filename}"
        return f"{paths}: {e.strerror}"
    if isinstance(e, FileNotFoundError) and len(e.args) == 1:
        return f"{e.args[0]}: no such file or directory"
    return str(e) or type(e).__name__


def progress_enabled(args) -> bool:
    if getattr(args, "no_progress", False) or not sys.stderr.isatty():
        return False
    return importlib.util.find_spec("tqdm") is not None


def check_output(out: str) -> str:
    """The output's extension, checked before any reading, with its place: not a
    directory, in a directory that exists."""
    ext = os.path.splitext(out)[1].lower()
    if ext not in OUTPUT_EXTENSIONS:
        raise ValueError(f"output {out!r}: extension must be .parquet, .arrow or .csv")
    if os.path.isdir(out):
        raise ValueError(f"output {out!r} is a directory")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        raise ValueError(f"output {out!r}: directory {parent!r} does not exist")
    return ext


def _host_table(batch):
    """A streamed batch (RecordBatch, cudf.DataFrame or DeviceTable) as a pyarrow Table."""
    import pyarrow as pa

    if isinstance(batch, pa.RecordBatch):
        return pa.Table.from_batches([batch])
    if isinstance(batch, pa.Table):
        return batch
    return batch.to_arrow()  # cudf.DataFrame / DeviceTable: copied to the host


class StreamWriter:
    """Write tables to ``out`` batch by batch (format by extension) into a
    temporary sibling, renamed into place by :meth:`close`; :meth:`abort`
    removes it, so a failed read leaves no partial output."""

    def __init__(self, out: str):
        self.out = out
        self.ext = check_output(out)
        self.tmp = os.path.join(os.path.dirname(os.path.abspath(out)), f".{os.path.basename(out)}.{os.getpid()}.part")
        self._writer = None
        self._sink = None

    def write(self, table) -> None:
        import pyarrow as pa

        if self._writer is None:
            if self.ext == ".parquet":
                import pyarrow.parquet as pq

                self._writer = pq.ParquetWriter(self.tmp, table.schema, compression="zstd")
            elif self.ext == ".csv":
                import pyarrow.csv as pcsv

                self._writer = pcsv.CSVWriter(self.tmp, table.schema)
            else:
                self._sink = pa.OSFile(self.tmp, "wb")
                self._writer = pa.ipc.new_file(self._sink, table.schema)
        self._writer.write_table(table)

    def close(self) -> None:
        self._writer.close()
        if self._sink is not None:
            self._sink.close()
        os.replace(self.tmp, self.out)

    def abort(self) -> None:
        for closer in (self._writer, self._sink):
            if closer is not None:
                try:
                    closer.close()
                except Exception:  # noqa: BLE001 - already failing; the file goes anyway
                    pass
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)


def leaf_rows(leaves) -> int:
    """Rows of the blocks a navigation selected (its leaves' masks): what a read of
    them decodes, before a time range trims the rows of its edge blocks."""
    return sum(int(sl.page.blocks["row_count"][sl.mask].sum()) for sl in leaves)


def artifact_planned_rows(art, series, tables, start, end) -> int:
    """The rows an artifact read of this selection will decode (metadata only)."""
    from ..plan import Selection

    sel = Selection.build(series, tables, start, end, art.manifest.timestamp.unit)
    return leaf_rows(art.navigate(sel))


def region_planned_rows(region, plan) -> int:
    """The rows a region read of ``plan`` will decode: a covered source's selected
    blocks (metadata only), an SST's row count when it is scanned."""
    from ..errors import SamplesError

    total = 0
    for src in plan.sources:
        try:
            if src.entry is None:
                raise LookupError
            total += leaf_rows(region.usable_artifact(src, plan.need).navigate(plan.selection))
        except (LookupError, SamplesError):
            total += int(src.record["rows"])
    return total


def write_stream(batches, out: str, progress: bool, desc: str = "reading", total: int | None = None) -> tuple[int, int]:
    """Write streamed batches to ``out``; (rows, bytes) written.  ``progress``: a
    tqdm bar on stderr advancing per batch (rows, with the bytes beside); with
    ``total`` (the rows the plan will decode) it shows the percentage and the time
    left, and ends at 100% when a time range trimmed some of those rows."""
    writer = StreamWriter(out)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(desc=desc, unit=" rows", unit_scale=True, total=total, file=sys.stderr)
    rows = nbytes = 0
    try:
        for b in batches:
            t = _host_table(b)
            writer.write(t)
            rows += t.num_rows
            nbytes += t.nbytes
            if bar is not None:
                bar.update(t.num_rows)
                bar.set_postfix_str(f"{nbytes / (1 << 20):,.1f} MiB", refresh=False)
        writer.close()
        if bar is not None and bar.total is not None and bar.n != bar.total:
            bar.total = bar.n  # the time range trimmed rows of the edge blocks: done is 100%
            bar.refresh()
    except BaseException:
        writer.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
    return rows, nbytes
