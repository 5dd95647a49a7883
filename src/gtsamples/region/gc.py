"""Garbage collection of a region's objects (local directories and fsspec URLs)."""

from __future__ import annotations

import datetime as _dt
import os
import re
import shutil
import time

from .catalog import CATALOG_DIR, CatalogError, is_file_id

_TMP_RE = re.compile(r"\.tmp-[0-9a-f]+")


class _FS:
    """The few listing / removal operations gc needs, local or fsspec."""

    def __init__(self, store):
        self.store = store
        self.local = store.is_local
        self.fs = store._fs

    def ls(self, path: str) -> list[tuple[str, bool]]:
        """(name, is_dir) children of a directory; [] when it does not exist."""
        try:
            if self.local:
                return [(e.name, e.is_dir()) for e in os.scandir(path)]
            out = []
            for d in self.fs.ls(path, detail=True):
                out.append((d["name"].rstrip("/").rsplit("/", 1)[-1], d.get("type") == "directory"))
            return out
        except FileNotFoundError:
            return []

    def newest_mtime(self, path: str, is_dir: bool) -> float | None:
        """Newest modification time of a file or of a directory and everything in it."""
        if self.local:
            try:
                t = os.stat(path).st_mtime
                if is_dir:
                    for dp, dns, fns in os.walk(path):
                        for n in fns + dns:
                            try:
                                t = max(t, os.stat(os.path.join(dp, n)).st_mtime)
                            except FileNotFoundError:
                                pass
                return t
            except FileNotFoundError:
                return None
        try:
            infos = self.fs.find(path, detail=True).values() if is_dir else [self.fs.info(path)]
        except FileNotFoundError:
            return None
        best = None
        for info in infos:
            for k in ("mtime", "LastModified", "last_modified", "updated", "created"):
                v = info.get(k)
                if v is None:
                    continue
                if isinstance(v, str):
                    try:
                        v = _dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
                    except ValueError:
                        continue
                if isinstance(v, _dt.datetime):
                    if v.tzinfo is None:
                        v = v.replace(tzinfo=_dt.timezone.utc)
                    v = v.timestamp()
                best = float(v) if best is None else max(best, float(v))
                break
        return best

    def rm(self, path: str, is_dir: bool) -> None:
        if self.local:
            if is_dir:
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            return
        try:
            self.fs.rm(path, recursive=is_dir)
        except FileNotFoundError:
            pass

    def rmdir_if_empty(self, path: str) -> None:
        if self.local:
            try:
                os.rmdir(path)
            except OSError:
                pass


def _parse_time(s) -> float | None:
    if not isinstance(s, str):
        return None
    try:
        return _dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def collect(region, grace: float, expire_versions: bool, dry_run: bool) -> dict:
    store, cat = region.store, region.catalog
    fs = _FS(store)
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
        for n in versions[:-1]:
            t = _parse_time(docs[n].get("created_at"))
            if t is not None and t < old:
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

    samples = store.path(f"{region.region_id}/samples")
    for fid, is_dir in fs.ls(samples):
        if not is_dir or fid == CATALOG_DIR or not is_file_id(fid):
            continue
        fdir = f"{samples}/{fid}" if not store.is_local else os.path.join(samples, fid)
        gens = fs.ls(fdir)
        removed_all = True
        for gen, gdir in gens:
            gpath = f"{fdir}/{gen}" if not store.is_local else os.path.join(fdir, gen)
            if (fid, gen) in referenced_gens:
                removed_all = False
                continue
            t = fs.newest_mtime(gpath, gdir)
            if t is None or t >= old:
                removed_all = False
                continue
            out["removed_generations"].append(gpath)
            if not dry_run:
                fs.rm(gpath, gdir)
        if removed_all and not dry_run:
            fs.rmdir_if_empty(fdir)

    # SST files gtsamples wrote (<region_id>/sst/<file_id>.parquet) and commit temporaries
    sst_dir = store.path(f"{region.region_id}/sst")
    for name, is_dir in fs.ls(sst_dir):
        if is_dir:
            continue
        key = f"{region.region_id}/sst/{name}"
        if key in referenced_paths:
            continue
        if not (name.endswith(".parquet") or _TMP_RE.search(name)):
            continue
        p = store.path(key)
        t = fs.newest_mtime(p, False)
        if t is not None and t < old:
            out["removed_ssts"].append(p)
            if not dry_run:
                fs.rm(p, False)
    for name, is_dir in fs.ls(cat.dir_path):
        if is_dir or not name.startswith(".tmp-"):
            continue
        p = store.path(cat.prefix + name)
        t = fs.newest_mtime(p, False)
        if t is not None and t < old:
            out["removed_tmp"].append(p)
            if not dry_run:
                fs.rm(p, False)
    return out
