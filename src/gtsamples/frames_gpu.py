"""GPU frames: the decoded device columns as a cuDF DataFrame or an Arrow table.

The GPU backend returns a :class:`DeviceTable` (CuPy columns, Arrow-layout
validity masks); :meth:`DeviceTable.to_cudf` wraps it into a
``cudf.DataFrame`` without copying and :meth:`DeviceTable.to_arrow` copies it
to a ``pyarrow.Table``.  The classes are defined with the decoder that fills
them (:mod:`gtsamples.decode.gpu.table`: decode sits below frames, so it must
not import this module); this module is their public home and the cuDF check
the read path runs before any device work (:func:`require_cudf`).

Importing this module imports neither CuPy nor cuDF.
"""

from __future__ import annotations

from .decode.gpu.table import (
    LOGICAL_TYPES,
    CudfUnavailableError,
    DeviceColumn,
    DeviceTable,
    mask_words,
    require_cudf,
)

__all__ = ["DeviceColumn", "DeviceTable", "CudfUnavailableError", "require_cudf", "mask_words", "LOGICAL_TYPES"]
