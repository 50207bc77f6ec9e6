"""The sandbox's file calls on the wire, against a loopback stand-in for the
API server: what upload_dir streams is a tar archive of the directory, made
as it is sent; the new file operations send the ops docs/sandbox.md names
and read their answers. The same against a real cluster is in
test_sandbox.py."""

from __future__ import annotations

import io
import json
import pathlib
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

import pytest

import kruntimes
from kruntimes.functions import Function
from kruntimes.sandbox import Downloaded, EntryInfo, Extracted, Sandbox, SandboxFileNotFound

Answer = Callable[[str, dict[str, list[str]], bytes], tuple[int, Any]]


class FakeAPIServer:
    """Answers PUT runs/files and POST runs/invoke with answer(method, query,
    body); a chunked body is read as it comes, and its chunks are counted."""

    def __init__(self, answer: Answer) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _body(self) -> tuple[bytes, int]:
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                    return self.rfile.read(int(self.headers.get("Content-Length", 0))), 0
                out, chunks = bytearray(), 0
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return bytes(out), chunks
                    out += self.rfile.read(size)
                    self.rfile.readline()
                    chunks += 1

            def _serve(self) -> None:
                body, chunks = self._body()
                url = urlparse(self.path)
                query = parse_qs(url.query)
                outer.requests.append({"method": self.command, "path": url.path, "query": query, "body": body,
                                       "chunks": chunks})
                code, obj = answer(self.command, query, body)
                raw = isinstance(obj, bytes)
                data = obj if raw else json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/x-tar" if raw else "application/json")
                if isinstance(obj, dict) and obj.get("kind") == "InvokeResult" and obj.get("error"):
                    self.send_header("X-Kruntime-Function-Error", obj["error"]["type"])
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = _serve  # noqa: N815
            do_PUT = _serve  # noqa: N815
            do_POST = _serve  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(tmp_path: pathlib.Path):
    servers: list[FakeAPIServer] = []

    def start(answer: Answer) -> tuple[FakeAPIServer, Sandbox]:
        server = FakeAPIServer(answer)
        servers.append(server)
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u", "namespace": "team"}}],
        }))
        client = kruntimes.Client(kubeconfig=str(kubeconfig))
        run = {"metadata": {"name": "box", "namespace": "team", "uid": "uid-1"},
               "spec": {"mode": {"function": {"handler": "kruntimes.sandbox"}}}}
        return server, Sandbox(Function(client, run), owned=False)

    yield start
    for s in servers:
        s.close()


def extracted(method: str, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
    names = tarfile.open(fileobj=io.BytesIO(body)).getnames()
    return 200, {"path": query["path"][0], "files": len(names), "bytes": len(body)}


def test_upload_dir_streams_a_tar_of_the_directory(fake, tmp_path: pathlib.Path) -> None:
    server, sb = fake(extracted)
    local = tmp_path / "proj"
    (local / "src" / "pkg").mkdir(parents=True)
    (local / "src" / "main.py").write_text("print('hi')\n")
    (local / "src" / "pkg" / "big.bin").write_bytes(bytes(range(256)) * 4096)  # 1 MiB: several chunks
    (local / "README").write_text("read me")
    (local / "latest").symlink_to("src/main.py")

    got = sb.files.upload_dir(local, "work/proj")
    assert isinstance(got, Extracted) and got.path == "work/proj"
    req = server.requests[0]
    assert req["method"] == "PUT" and req["path"] == "/apis/kruntimes.io/v1alpha1/namespaces/team/runs/box/files"
    assert req["query"] == {"path": ["work/proj"], "extract": ["tar"]}
    assert req["chunks"] > 1, "streamed as it is made, not sent whole"
    with tarfile.open(fileobj=io.BytesIO(req["body"])) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {".", "./README", "./latest", "./src", "./src/main.py", "./src/pkg", "./src/pkg/big.bin"}
        assert members["./latest"].issym() and members["./latest"].linkname == "src/main.py", "links go as links"
        assert tar.extractfile("./src/pkg/big.bin").read() == bytes(range(256)) * 4096

    with pytest.raises(NotADirectoryError):
        sb.files.upload_dir(local / "README", "x")


def test_upload_tar_sends_the_archive_as_it_is(fake, tmp_path: pathlib.Path) -> None:
    server, sb = fake(lambda m, q, b: (200, {"path": q["path"][0], "files": 2, "bytes": 10}))
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"\x1f\x8b pretend gzip")
    assert sb.files.upload_tar(".", archive) == Extracted(".", 2, 10)
    assert server.requests[0]["body"] == b"\x1f\x8b pretend gzip"
    assert server.requests[0]["query"]["extract"] == ["tar"]


def test_a_refused_archive_raises_the_servers_400(fake) -> None:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 400, "reason": "BadRequest",
              "message": "the archive's entry \"../x\" leaves the directory it is extracted into"}
    _, sb = fake(lambda m, q, b: (400, status))
    with pytest.raises(kruntimes.KruntimesError, match="leaves the directory") as e:
        sb.files.upload_tar("d", b"not really")
    assert e.value.code == 400


def invoked(answers: dict[str, Any]) -> Answer:
    def answer(method: str, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
        op = json.loads(body)["op"]
        out = answers[op]
        result: dict[str, Any] = {"kind": "InvokeResult", "invocationId": "i", "durationMillis": 1}
        if isinstance(out, Exception):
            result["error"] = {"type": type(out).__name__, "message": str(out)}
        else:
            result["output"] = out
        return 200, result
    return answer


def test_file_ops_send_their_ops_and_read_the_answers(fake) -> None:
    server, sb = fake(invoked({
        "list_files": {"entries": [{"name": "a", "type": "dir", "size": 4096, "mode": 0o755, "mtime": 1.5},
                                   {"name": "a/b.txt", "type": "file", "size": 3, "mode": 0o644, "mtime": 2.5}],
                       "truncated": True},
        "stat": {"path": "l", "name": "l", "type": "symlink", "size": 5, "mode": 0o777, "mtime": 3.0, "target": "a/b.txt"},
        "mkdir": {"created": True},
        "move": {},
        "remove": {},
    }))
    entries = sb.files.list(".", recursive=True, max_entries=2)
    assert entries == [EntryInfo("a", "dir", 4096), EntryInfo("a/b.txt", "file", 3)]
    assert entries.truncated
    assert entries[1].mode == 0o644 and entries[1].mtime == 2.5
    info = sb.files.stat("l")
    assert (info.name, info.type, info.target, info.mode) == ("l", "symlink", "a/b.txt", 0o777)
    assert sb.files.mkdir("x/y") is True
    sb.files.move("a", "c")
    sb.files.remove("c", recursive=False)
    sent = [json.loads(r["body"]) for r in server.requests]
    assert sent == [
        {"op": "list_files", "path": ".", "recursive": True, "max_entries": 2},
        {"op": "stat", "path": "l"},
        {"op": "mkdir", "path": "x/y", "parents": True, "exist_ok": True},
        {"op": "move", "src": "a", "dst": "c"},
        {"op": "remove", "path": "c", "recursive": False},
    ]


def test_a_missing_path_raises_sandbox_file_not_found(fake) -> None:
    _, sb = fake(invoked({"stat": FileNotFoundError("no such file")}))
    with pytest.raises(SandboxFileNotFound) as e:
        sb.files.stat("nope")
    assert isinstance(e.value, kruntimes.FunctionError), "still a FunctionError, as before"
    assert e.value.type == "FileNotFoundError"


def _archive(*members: tuple[str, str, str]) -> bytes:
    """A tar archive of (name, kind, content or link target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, value in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1700000000
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, value
                tar.addfile(info)
            else:
                data = value.encode()
                info.size, info.mode = len(data), 0o4755 if kind == "setuid" else 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_download_tar_streams_the_archive_the_server_writes(fake, tmp_path: pathlib.Path) -> None:
    archive = _archive(("a.txt", "file", "a" * 700_000), ("d/", "dir", ""))
    server, sb = fake(lambda m, q, b: (200, archive))
    assert b"".join(sb.files.download_tar("work")) == archive
    assert server.requests[-1]["method"] == "GET"
    assert server.requests[-1]["query"]["archive"] == ["tar"] and server.requests[-1]["query"]["path"] == ["work"]
    assert sb.files.download_tar("work", tmp_path / "w.tar", gzip=True) == len(archive)
    assert (tmp_path / "w.tar").read_bytes() == archive
    assert server.requests[-1]["query"]["archive"] == ["tar.gz"]
    out = io.BytesIO()
    assert sb.files.download_tar("work", out) == len(archive) and out.getvalue() == archive


def test_download_dir_extracts_safely(fake, tmp_path: pathlib.Path) -> None:
    archive = _archive(("src/", "dir", ""), ("src/main.py", "file", "print('hi')\n"), ("latest", "link", "src/main.py"),
                       ("run.sh", "setuid", "#!/bin/sh\n"), ("abs", "link", "/etc/passwd"),
                       ("up", "link", "../../outside"), ("../escape.txt", "file", "x"))
    _, sb = fake(lambda m, q, b: (200, archive))
    local = tmp_path / "out"
    got = sb.files.download_dir("work/proj", local)
    assert got == Downloaded(str(local), 2, len("print('hi')\n") + len("#!/bin/sh\n"), ("abs", "up", "../escape.txt"))
    assert (local / "src" / "main.py").read_text() == "print('hi')\n"
    assert (local / "latest").is_symlink() and (local / "latest").read_text() == "print('hi')\n"
    assert (local / "run.sh").stat().st_mode & 0o7777 == 0o755, "setuid is dropped"
    assert (local / "src" / "main.py").stat().st_mtime == 1700000000
    assert not (local / "abs").exists() and not (local / "up").is_symlink()
    assert not (tmp_path / "escape.txt").exists(), "nothing lands outside local_dir"


def test_download_of_a_missing_directory_raises_not_found(fake, tmp_path: pathlib.Path) -> None:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
              "message": 'no file "nope" in the sandbox\'s workspace'}
    _, sb = fake(lambda m, q, b: (404, status))
    with pytest.raises(kruntimes.NotFound):
        sb.files.download_tar("nope")
    with pytest.raises(kruntimes.NotFound):
        sb.files.download_dir("nope", tmp_path / "out")
