"""manifest.json and the catalog entry ("Artifact manifest").

``parse_manifest`` and ``parse_catalog_entry`` turn untrusted JSON into frozen
objects, enforcing every rule of the spec's "Artifact manifest" section;
``check_entry`` checks a manifest and its object list against a catalog entry.

One path: strict JSON into Python values, then one check per rule in the spec's
order; the first broken rule raises, naming the object, the key path, the rule
and what was found.  The modules, each using only those before it:

* :mod:`.model`: the frozen objects (``Manifest``, ``PartTable``, ``CatalogEntry``, ...)
  and the FileId rule (``is_file_id``);
* :mod:`.checks`: strict JSON and the checks the rules are written with; a part
  object as a row;
* :mod:`.files_array`: a large manifest's ``files`` array read column-wise
  (bounded memory, benchmarks/FUZZING.md F4);
* :mod:`.parse`: the rules in order.
"""

from .checks import load_strict_json
from .model import (
    PART_COLUMNS,
    PART_DTYPE,
    CatalogEntry,
    FieldColumn,
    Manifest,
    ObjectRef,
    PartDescriptor,
    PartTable,
    TimestampColumn,
    FILE_ID_CHARS,
    artifact_prefix,
    all_file_ids,
    file_ids_distinct,
    file_ids_text_ok,
    is_file_id,
)
from .parse import MIN_PART_SIZE, check_entry, check_entry_objects, parse_catalog_entry, parse_manifest

__all__ = [
    "PART_COLUMNS", "PART_DTYPE", "MIN_PART_SIZE", "CatalogEntry", "FieldColumn", "Manifest", "ObjectRef",
    "PartDescriptor", "PartTable", "TimestampColumn", "artifact_prefix", "check_entry", "check_entry_objects",
    "FILE_ID_CHARS", "all_file_ids", "file_ids_distinct", "file_ids_text_ok", "is_file_id", "load_strict_json",
    "parse_catalog_entry", "parse_manifest",
]
