"""The region layer's argument checks, in one place: counts that must be positive
integers, and lists of SST file ids (one string is refused, never read as its
characters)."""

from __future__ import annotations

from ..argcheck import is_integer


def positive_int(name: str, v, what: str, none_ok: bool = False) -> int | None:
    """``v`` as a positive integer (numpy's too; not a bool, float, string or duration:
    :func:`~gtsamples.argcheck.is_integer`), else a
    TypeError or ValueError naming ``name`` (``what``: what it counts); None passes
    through when ``none_ok``."""
    if v is None and none_ok:
        return None
    also = " or None" if none_ok else ""
    if not is_integer(v):
        raise TypeError(f"{name} must be a positive integer{also} ({what}), not {type(v).__name__} {v!r}")
    if v < 1:
        raise ValueError(f"{name} must be a positive integer{also} ({what}), not {v}")
    return int(v)


def file_ids_arg(name: str, ids) -> list[str]:
    """``ids`` (an iterable of SST file ids) as a list; one string is refused, not read as
    its characters (``build(file_ids="...")`` would otherwise build nothing, silently)."""
    if isinstance(ids, (str, bytes)):
        raise TypeError(f"{name} must be an iterable of file ids, not one {type(ids).__name__} ({ids!r}: "
                        f"wrap it in a list)")
    return [str(x) for x in ids]
