"""Garbage collection of a region's objects (local directories and fsspec URLs,
listed and removed through the region's :class:`~gtsamples.storage.Store`)."""

from __future__ import annotations

import datetime as _dt
import re
import time

from .catalog import CATALOG_DIR, CatalogError, is_file_id

_TMP_RE = re.compile(r"\.tmp-[0-9a-f]+")


def _parse_time(s) -> float | None:
    if not isinstance(s, str):
        return None
    try:
        return _dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def collect(region, grace: float, expire_versions: bool, dry_run: bool) -> dict:
    store, cat = region.store, region.catalog
    now = time.time()
    old = now - grace
    out = {"removed_generations": [], "removed_ssts": [], "removed_tmp": [], "expired_versions": [],
           "kept_versions": []}

    versions = cat.list_versions()
    if not versions:
        raise CatalogError(f"{cat.dir_path}: region {region.region_id} has no catalog")
    latest = versions[-1]
    docs = {}
    for n in versions:
        try:
            docs[n] = cat.read_version(n)
        except CatalogError:
            if n == latest:
                raise
            docs[n] = None  # unreadable old version: protects nothing it might list -> be conservative
    if any(d is None for d in docs.values()):
        raise CatalogError(f"{cat.dir_path}: an older catalog version is unreadable; refusing to collect garbage")
    if expire_versions:
        # oldest first, stopping at the first version kept: never a newer one before an
        # older (writers' clocks may disagree), which a reopen relies on (catalog.py)
        for n in versions[:-1]:
            t = _parse_time(docs[n].get("created_at"))
            if t is None or t >= old:
                break
            out["expired_versions"].append(n)
            if not dry_run:
                cat.delete_version(n)
            del docs[n]
    out["kept_versions"] = sorted(docs)

    referenced_gens = set()
    referenced_paths = set()
    for d in docs.values():
        for a in d["artifacts"]:
            if isinstance(a, dict):
                referenced_gens.add((a.get("file_id"), a.get("generation")))
        for s in d["ssts"]:
            referenced_paths.add(s["path"])

    samples = f"{region.region_id}/samples"
    for fid, is_dir in store.list(samples):
        if not is_dir or fid == CATALOG_DIR or not is_file_id(fid):
            continue
        fdir = f"{samples}/{fid}"
        removed_all = True
        for gen, gdir in store.list(fdir):
            gkey = f"{fdir}/{gen}"
            if (fid, gen) in referenced_gens:
                removed_all = False
                continue
            t = store.newest_mtime(gkey, gdir)
            if t is None or t >= old:
                removed_all = False
                continue
            out["removed_generations"].append(store.path(gkey))
            if not dry_run:
                store.remove(gkey, recursive=gdir)
        if removed_all and not dry_run:
            store.rmdir_if_empty(fdir)

    # SST files gtsamples wrote (<region_id>/sst/<file_id>.parquet) and commit temporaries
    sst_dir = f"{region.region_id}/sst"
    for name, is_dir in store.list(sst_dir):
        if is_dir:
            continue
        key = f"{sst_dir}/{name}"
        if key in referenced_paths:
            continue
        if not (name.endswith(".parquet") or _TMP_RE.search(name)):
            continue
        t = store.newest_mtime(key, False)
        if t is not None and t < old:
            out["removed_ssts"].append(store.path(key))
            if not dry_run:
                store.remove(key)
    for name, is_dir in store.list(cat.prefix):
        if is_dir or not name.startswith(".tmp-"):
            continue
        key = cat.prefix + name
        t = store.newest_mtime(key, False)
        if t is not None and t < old:
            out["removed_tmp"].append(store.path(key))
            if not dry_run:
                store.remove(key)
    return out
