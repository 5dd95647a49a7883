"""Storage failures are gtsamples errors, classified as the hierarchy says: a store that
cannot be reached, or whose filesystem package is missing, is a StorageError; only a
reachable store answering "no such object" makes a missing object (CorruptArtifactError).
Real servers on 127.0.0.1 (a closed port, an HTTP server, moto's S3), no mocks."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import socket
import threading

import pytest

from gtsamples import open_artifact
from gtsamples.errors import CorruptArtifactError, StorageError
from gtsamples.storage import Store

from .test_store import s3_opts  # noqa: F401 - moto's S3 server on 127.0.0.1


def test_url_whose_file_system_is_not_installed():
    # open_artifact("gcs://...") without gcsfs raised fsspec's ImportError
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    for call in (lambda: Store("gcs://bucket/x"), lambda: open_artifact("gcs://bucket/x")):
        with pytest.raises(StorageError) as ei:
            call()
        assert str(ei.value).startswith("gcs://bucket/x: cannot open: ") and "gcsfs" in str(ei.value)


def test_url_whose_scheme_fsspec_does_not_know():
    # open_artifact("nosuchfs://...") raised fsspec's ValueError("Protocol not known: nosuchfs")
    for call in (lambda: Store("nosuchfs://b/x"), lambda: open_artifact("nosuchfs://b/x")):
        with pytest.raises(StorageError, match=r"^nosuchfs://b/x: cannot open: Protocol not known: nosuchfs"):
            call()


def _closed_port() -> int:
    """A 127.0.0.1 port nothing listens on (bound, then closed): a connection is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def http_root(tmp_path_factory):
    """An HTTP server on 127.0.0.1 serving a directory holding one object, ``there``."""
    root = tmp_path_factory.mktemp("http")
    (root / "there").write_bytes(b"0123456789")
    (root / "norange").mkdir()
    (root / "norange" / "there").write_bytes(b"0123456789")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))

    class Quiet(handler.func):
        """Answers ``Range: bytes=a-b`` with 206 (SimpleHTTPRequestHandler ignores it)."""

        def do_HEAD(self):
            if not self._failed():
                super().do_HEAD()

        def _failed(self) -> bool:
            """``/status-<code>/...`` answers that status (a 403, a 500)."""
            first = self.path.lstrip("/").split("/", 1)[0]
            if first.startswith("status-"):
                self.send_error(int(first[7:]))
                return True
            return False

        def do_GET(self):
            if self._failed():
                return
            rng = self.headers.get("Range")
            path = root / self.path.lstrip("/")
            if not rng or not path.is_file() or self.path.startswith("/norange/"):
                return super().do_GET()
            data = path.read_bytes()
            a, b = (int(x) for x in rng.split("=", 1)[1].split("-"))
            body = data[a: b + 1]
            self.send_response(206)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Content-Range", f"bytes {a}-{a + len(body) - 1}/{len(data)}")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_unreachable_http_store_is_a_storage_error_not_a_missing_object():
    # fsspec's HTTP filesystem raises FileNotFoundError from a refused connection (its
    # cause): open_artifact, size and exists called that "object is missing" / False
    url = f"http://127.0.0.1:{_closed_port()}/gen"
    with pytest.raises(StorageError) as ei:
        open_artifact(url)
    assert not isinstance(ei.value, CorruptArtifactError)
    assert str(ei.value).startswith(f"{url}/manifest.json: cannot stat: ") and "onnect" in str(ei.value)
    store = Store(url)
    for call in (lambda: store.size("manifest.json"), lambda: store.exists("manifest.json"),
                 lambda: store.read("manifest.json", 0, 4)):
        with pytest.raises(StorageError) as ei:
            call()
        assert url in str(ei.value) and "onnect" in str(ei.value), str(ei.value)


def test_missing_object_on_a_reachable_http_store_is_missing(http_root):
    store = Store(http_root)
    assert store.size("there") == 10 and store.read("there", 2, 3) == b"234"
    assert store.exists("there") and not store.exists("nope")
    for call in (lambda: store.size("nope"), lambda: store.read("nope", 0, 4), lambda: open_artifact(http_root)):
        with pytest.raises(CorruptArtifactError, match="object is missing"):
            call()


def test_s3_unreachable_endpoint_and_missing_object(s3_opts):
    url = "s3://gtsamples-store/errors-gen"
    with pytest.raises(CorruptArtifactError, match=f"{url[5:]}/manifest.json: object is missing"):
        open_artifact(url, storage_options=s3_opts)
    store = Store(url, s3_opts)
    assert not store.exists("nope")
    with pytest.raises(CorruptArtifactError, match="object is missing"):
        store.read("nope", 0, 4)
    port = _closed_port()
    down = {**s3_opts, "client_kwargs": {**s3_opts["client_kwargs"], "endpoint_url": f"http://127.0.0.1:{port}"},
            "config_kwargs": {"retries": {"max_attempts": 1}}}
    for call in (lambda: open_artifact(url, storage_options=down), lambda: Store(url, down).exists("x"),
                 lambda: Store(url, down).read("x", 0, 4)):
        with pytest.raises(StorageError) as ei:
            call()
        assert not isinstance(ei.value, CorruptArtifactError) and str(port) in str(ei.value), str(ei.value)


def test_local_file_where_the_artifact_directory_belongs_is_missing(tmp_path, s3_opts):
    # a file given as the artifact directory raised StorageError("cannot stat: Not a
    # directory") while an empty directory (and S3, a key under another object's name)
    # said the manifest is missing
    f = tmp_path / "f"
    f.write_bytes(b"x")
    for root, opts in ((tmp_path, None), (f, None)):
        with pytest.raises(CorruptArtifactError, match="manifest.json: object is missing"):
            open_artifact(root, storage_options=opts)
    store = Store(tmp_path)
    for call in (lambda: store.size("f/manifest.json"), lambda: store.read("f/manifest.json", 0, 1),
                 lambda: store.read("f/manifest.json", 0, 1 << 31)):
        with pytest.raises(CorruptArtifactError, match="f/manifest.json: object is missing"):
            call()
    s3 = Store("s3://gtsamples-store", s3_opts)
    s3.put("errors-file", b"x")
    with pytest.raises(CorruptArtifactError, match="errors-file/manifest.json: object is missing"):
        open_artifact("s3://gtsamples-store/errors-file", storage_options=s3_opts)


@pytest.mark.parametrize("status", [403, 500])
def test_http_error_status_is_a_storage_error(http_root, status):
    # an HTTP 403 or 500 (after fsspec's HEAD then GET) was "object is missing"
    url = f"{http_root}/status-{status}/gen"
    for call in (lambda: open_artifact(url), lambda: Store(url).exists("manifest.json"),
                 lambda: Store(url).read("manifest.json", 0, 4)):
        with pytest.raises(StorageError) as ei:
            call()
        assert not isinstance(ei.value, CorruptArtifactError) and str(status) in str(ei.value), str(ei.value)


def test_server_ignoring_range_is_a_storage_error(http_root):
    # a server answering a ranged GET with the whole object (200): the read said the
    # object "is shorter than its recorded size: ... returned 10 bytes" (it is longer)
    store = Store(f"{http_root}/norange")
    with pytest.raises(StorageError, match=r"there: cannot read \[2, 5\): the store returned 10 bytes"):
        store.read("there", 2, 3)
