"""Object storage: local files and fsspec URLs; ranged and coalesced reads; writes.

A ``Store`` reads byte ranges of objects named by store-relative keys.  Sizes
recorded in a catalog entry or manifest are passed in, so locating a trailer
never needs a stat.  Every read is counted in a :class:`ReadStats`.

``Store`` is an abstract base (after zarr v3's ``Store`` ABC): ``Store(root,
storage_options)`` opens the implementation registered for the root's scheme
(:func:`register_store`, below): :class:`LocalStore` (paths, ``file://``; it owns
``os.pread``) or :class:`FsspecStore` (every other URL).  Writes go through the same
``Store``:

* :meth:`Store.put_if_absent`: create an object only if it does not exist
  (catalog commits); local: a fsynced temporary file ``os.link``-ed to its name;
  fsspec: a conditional put (``If-None-Match: *`` on S3), read back and compared;
* :meth:`Store.publish`: write a directory of objects so that a crash never
  leaves anything that looks complete (local: a temporary sibling directory
  renamed into place; fsspec: the objects, the completing one -- the manifest --
  last);
* :meth:`Store.put` (one whole object), :meth:`Store.list`,
  :meth:`Store.remove`, :meth:`Store.rmdir_if_empty`, :meth:`Store.newest_mtime`.

Remote faults: the libraries retry what is safe to retry (botocore: 5xx,
throttling and connection errors; s3fs: bodies cut short; their settings are
the ``storage_options``).  A ranged read whose body still comes back short (or
fails botocore's checksum) is read again, twice at most, then is corruption;
what keeps failing is a :class:`~gtsamples.errors.StorageError` naming the
object.  A conditional put whose outcome the client cannot see (a retried
request that finds its own first attempt) is decided by reading the object back.

The package: ``store.py`` (the :class:`Store` ABC, :class:`ObjectReader`,
:class:`ReadStats`, range coalescing, the scheme registry), ``local.py``
(:class:`LocalStore`: ``os.pread``, fsynced files, renames that never replace),
``remote.py`` (:class:`FsspecStore`), ``fds.py`` (the process-wide cache of open part
files :class:`LocalStore` reads through: :func:`set_fd_cache_size`, :func:`clear_fd_cache`).  Tuning constants are read at run time
in the submodule that uses them: patch them there (e.g. ``storage.store.SMALL_RANGE_COUNT``).
"""

from . import fds
from .fds import DEFAULT_MAX_FDS, FdCache, clear_fd_cache, default_fd_cache, set_fd_cache_size
from .local import LocalObjectReader, LocalPublication, LocalStore
from .remote import REMOTE_REREADS, FsspecPublication, FsspecStore
from .store import (
    LOCAL_COALESCE_GAP,
    MAX_OBJECT_END,
    PREAD_MAX_BYTES,
    REMOTE_COALESCE_GAP,
    SMALL_RANGE_COUNT,
    ObjectReader,
    ReadStats,
    Store,
    check_object_end,
    coalesce,
    is_local_root,
    register_store,
    root_arg,
    store_class,
)

# The one place a URL scheme meets its store class.
register_store("file", LocalStore)  # plain paths too
register_store("*", FsspecStore)  # every other scheme: fsspec resolves it

__all__ = [
    "DEFAULT_MAX_FDS", "FdCache", "clear_fd_cache", "default_fd_cache", "fds", "set_fd_cache_size",
    "LOCAL_COALESCE_GAP", "MAX_OBJECT_END", "REMOTE_COALESCE_GAP", "REMOTE_REREADS", "PREAD_MAX_BYTES",
    "SMALL_RANGE_COUNT", "FsspecPublication", "FsspecStore", "LocalObjectReader", "LocalPublication", "LocalStore",
    "ObjectReader", "ReadStats", "Store", "check_object_end", "coalesce", "is_local_root", "register_store", "root_arg",
    "store_class",
]
