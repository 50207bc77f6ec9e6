"""Sandboxes through the SDK against a real cluster: a function Run with the
built-in handler kruntimes.sandbox on a Runtime of capacity 1."""

from __future__ import annotations

import os
import pathlib
import time
import uuid

import pytest

import kruntimes
from conftest import poll
from kruntimes.sandbox import (
    MAX_FILE_BYTES,
    CommandResult,
    EntryInfo,
    Sandbox,
    SandboxPathError,
    SharedRuntime,
)


def run_exists(client: kruntimes.Client, name: str) -> bool:
    try:
        client.functions.get(name)
    except kruntimes.NotFound:
        return False
    return True


def test_sandbox_code_commands_and_files(client: kruntimes.Client, sandbox_runtime: str) -> None:
    with client.sandbox(sandbox_runtime, idle_timeout=600, ready_timeout=180) as sb:
        assert sb.function.run["spec"]["mode"]["function"]["handler"] == "kruntimes.sandbox"
        assert "source" not in sb.function.run["spec"] or not sb.function.run["spec"]["source"], "no source is needed"

        # State is kept across run_code calls; the last expression is the result.
        first = sb.run_code("import math\nx = 40")
        assert first.result is None and first.error is None
        second = sb.run_code("print('two more')\nx + 2")
        assert second.result == 42
        assert second.stdout == "two more\n"
        assert sb.run_code("object()").result.startswith("<object object"), "not JSON: its repr"

        # An exception is returned with its traceback, and the sandbox stays usable.
        failed = sb.run_code("def f():\n    return math.sqrt(-1)\nf()")
        assert failed.error is not None
        assert failed.error.name == "ValueError"
        assert "math domain error" in failed.error.value
        assert "return math.sqrt(-1)" in failed.error.traceback
        assert sb.run_code("x").result == 40

        # A runaway command ends at its timeout; the next one runs.
        started = time.monotonic()
        slow = sb.commands.run("sleep 60", timeout=1)
        assert time.monotonic() - started < 15
        assert slow.timed_out and slow.exit_code == 137
        ok = sb.commands.run(["sh", "-c", 'echo "$GREETING" from $(pwd | xargs basename); exit 3'],
                             env={"GREETING": "hi"})
        assert ok == CommandResult(stdout=f"hi from {sb.function.uid}\n", stderr="", exit_code=3)

        # Files round-trip, as bytes or str.
        blob = bytes(range(256)) * 1024
        sb.files.write("data/blob.bin", blob)
        sb.files.write("data/note.txt", "héllo")
        assert sb.files.read("data/blob.bin") == blob
        assert sb.files.read("data/note.txt") == "héllo".encode()
        assert sb.run_code("len(open('data/blob.bin', 'rb').read())").result == len(blob), "code sees the files"
        assert sb.files.list("data") == [EntryInfo("blob.bin", "file", len(blob)), EntryInfo("note.txt", "file", 6)]
        assert sb.files.exists("data/note.txt")
        sb.files.remove("data/note.txt")
        assert not sb.files.exists("data/note.txt")

        # Path escapes are refused by the server.
        sb.commands.run("ln -s /etc out")
        for path in ("../x", "/etc/passwd", "out/passwd"):
            with pytest.raises(SandboxPathError) as refused:
                sb.files.read(path)
            assert refused.value.type == "SandboxPathError"
            assert isinstance(refused.value, kruntimes.FunctionError)
        with pytest.raises(SandboxPathError):
            sb.files.write("../escape.txt", "no")

        # Over the bounds: refused before sending.
        with pytest.raises(kruntimes.PayloadTooLarge):
            sb.files.write("big.bin", b"\0" * (2 << 20))
        with pytest.raises(kruntimes.PayloadTooLarge):
            sb.files.write("big.bin", b"\0" * (MAX_FILE_BYTES + 1))
        with pytest.raises(kruntimes.PayloadTooLarge):
            sb.run_code("s = '" + "a" * (1 << 20) + "'")
        assert not sb.files.exists("big.bin")
        assert sb.run_code("'s' in globals()").result is False, "the large code was not sent"
        name = sb.name
    poll(lambda: not run_exists(client, name), 60, f"closing the sandbox deletes {name}")


def test_with_deletes_the_sandbox_even_when_the_body_raises(client: kruntimes.Client,
                                                            sandbox_runtime: str) -> None:
    with pytest.raises(RuntimeError):
        with Sandbox.create(client, runtime=sandbox_runtime, ready_timeout=180) as sb:
            name = sb.name
            assert sb.run_code("1 + 1").result == 2
            raise RuntimeError("body failed")
    poll(lambda: not run_exists(client, name), 60, f"the with block deletes {name}")


def test_a_shared_runtime_is_refused_unless_asked(client: kruntimes.Client, python_runtime: str) -> None:
    label = {"case": f"shared-{uuid.uuid4().hex[:6]}"}
    with pytest.raises(SharedRuntime):
        Sandbox.create(client, runtime=python_runtime, labels=label)
    assert client.functions.list(label) == [], "nothing was created"
    with Sandbox.create(client, runtime=python_runtime, shared=True, labels=label) as sb:
        assert sb.run_code("6 * 7").result == 42


def test_connect_attaches_without_owning(client: kruntimes.Client, sandbox_runtime: str) -> None:
    with Sandbox.create(client, runtime=sandbox_runtime, ready_timeout=180) as sb:
        sb.run_code("shared_state = 'kept'")
        other = Sandbox.connect(client, sb.name)
        assert other.run_code("shared_state").result == "kept"
        other.close()
        assert run_exists(client, sb.name), "a connected handle does not delete the sandbox"


def test_background_commands_stream_their_output(client: kruntimes.Client, sandbox_runtime: str) -> None:
    with client.sandbox(sandbox_runtime, idle_timeout=600, ready_timeout=180) as sb:
        lines: list[str] = []
        h = sb.commands.run("echo first; while [ ! -e go ]; do sleep 0.05; done; echo second; echo oops >&2; exit 4",
                            background=True, on_stdout=lines.append)
        # The command waits for a file the test writes only once the first
        # line arrived: that line came while the command ran.
        poll(lambda: lines == ["first\n"], 30, "the first line while the command runs")
        listed = {c.id: c for c in sb.commands.list()}
        assert listed[h.id].running and listed[h.id].exit_code is None
        with pytest.raises(TimeoutError):
            h.wait(timeout=0.2)
        sb.files.write("go", "")
        done = h.wait(timeout=60)
        assert done == CommandResult(stdout="first\nsecond\n", stderr="oops\n", exit_code=4)
        assert lines == ["first\n", "second\n"]
        assert h.output() == "first\nsecond\noops\n", "the log keeps both streams in write order"
        assert list(sb.commands.connect(h.id).stream("Stderr")) == ["oops\n"], "an ended command's log is read whole"

        # stdin, kept open until eof.
        cat = sb.commands.run("cat", background=True, stdin=True)
        cat.send_stdin("hello ")
        cat.send_stdin(b"world\n", eof=True)
        assert cat.wait(timeout=60).stdout == "hello world\n"

        # A kill takes the command and what it started; the sandbox stays usable.
        sleeper = sb.commands.start("sleep 600 & sleep 600")
        sleeper.kill()
        assert sleeper.wait(timeout=60).exit_code == 137
        assert sb.run_code("1 + 1").result == 2

        # Streamed in the foreground: the callbacks get each line, the result all of it.
        got: list[str] = []
        r = sb.commands.run("echo a; echo b >&2", on_stdout=got.append, on_stderr=got.append)
        assert (r.stdout, r.stderr, r.exit_code) == ("a\n", "b\n", 0)
        assert sorted(got) == ["a\n", "b\n"]

        with pytest.raises(kruntimes.NotFound):
            sb.commands.connect("no-such-command")
        with pytest.raises(kruntimes.NotFound):
            list(kruntimes.CommandHandle(sb, "no-such-command", None).stream())


def test_files_upload_and_download_stream_any_size(client: kruntimes.Client, sandbox_runtime: str,
                                                   tmp_path: pathlib.Path) -> None:
    import hashlib
    import io
    import os

    with client.sandbox(sandbox_runtime, idle_timeout=600, ready_timeout=180) as sb:
        # Past the 512 KiB of write/read, from a local file, streamed both ways.
        big = os.urandom(5 * MAX_FILE_BYTES + 11)
        src = tmp_path / "big.bin"
        src.write_bytes(big)
        assert sb.files.upload("in/big.bin", src) == len(big)
        assert sb.files.exists("in/big.bin"), "missing directories are made"
        dst = tmp_path / "back.bin"
        assert sb.files.download("in/big.bin", dst) == len(big)
        assert hashlib.sha256(dst.read_bytes()).digest() == hashlib.sha256(big).digest()

        # bytes, str and file objects; the file seen by the sandbox's code.
        assert sb.files.upload("a.txt", "héllo") == len("héllo".encode())
        assert sb.run_code("open('a.txt', encoding='utf-8').read()").result == "héllo"
        assert sb.files.upload("b.bin", io.BytesIO(b"\x00\x01")) == 2
        out = io.BytesIO()
        assert sb.files.download("b.bin", out) == 2 and out.getvalue() == b"\x00\x01"
        assert sb.files.download("a.txt") == "héllo".encode()
        assert sb.files.upload("empty", b"") == 0 and sb.files.download("empty") == b""

        with pytest.raises(kruntimes.NotFound):
            sb.files.download("no/such/file")
        with pytest.raises(kruntimes.KruntimesError, match="leaves the sandbox's workspace") as escaped:
            sb.files.upload("../escape", b"x")
        assert escaped.value.code == 400
        with pytest.raises(kruntimes.KruntimesError) as elsewhere:
            sb.files.download("/etc/passwd")
        assert elsewhere.value.code == 400
        assert not (tmp_path / "missing.bin").exists()
        with pytest.raises(kruntimes.NotFound):
            sb.files.download("no/such/file", tmp_path / "missing.bin")
        assert not (tmp_path / "missing.bin").exists(), "a failed download leaves no local file"


def test_files_tree_operations_and_archives(client: kruntimes.Client, sandbox_runtime: str,
                                             tmp_path: pathlib.Path) -> None:
    from kruntimes.sandbox import SandboxFileNotFound

    local = tmp_path / "proj"
    (local / "src" / "pkg").mkdir(parents=True)
    (local / "src" / "main.py").write_text("print('hi')\n")
    (local / "src" / "pkg" / "data.bin").write_bytes(b"\0" * (3 << 20))
    (local / "latest").symlink_to("src/main.py")

    with client.sandbox(sandbox_runtime, idle_timeout=600, ready_timeout=180) as sb:
        # A local directory, tarred as it is sent, extracted in the workspace.
        got = sb.files.upload_dir(local, "work/proj")
        assert (got.files, got.bytes) == (2, len("print('hi')\n") + (3 << 20))
        tree = sb.files.list("work", recursive=True)
        assert [e.name for e in tree] == ["proj", "proj/latest", "proj/src", "proj/src/main.py", "proj/src/pkg",
                                          "proj/src/pkg/data.bin"]
        assert not tree.truncated
        assert sb.commands.run("python3 work/proj/latest").stdout == "hi\n", "links arrive as links"
        cut = sb.files.list("work", recursive=True, max_entries=2)
        assert len(cut) == 2 and cut.truncated

        # And back: the directory as an archive, extracted locally.
        back = sb.files.download_dir("work/proj", tmp_path / "back")
        assert (back.files, back.bytes, back.skipped) == (2, len("print('hi')\n") + (3 << 20), ())
        assert (tmp_path / "back" / "src" / "main.py").read_text() == "print('hi')\n"
        assert (tmp_path / "back" / "src" / "pkg" / "data.bin").read_bytes() == b"\0" * (3 << 20)
        assert os.readlink(tmp_path / "back" / "latest") == "src/main.py", "links come back as links"
        import io as _io
        import tarfile as _tarfile
        names = _tarfile.open(fileobj=_io.BytesIO(b"".join(sb.files.download_tar("work/proj", gzip=True)))).getnames()
        assert names == ["latest", "src", "src/main.py", "src/pkg", "src/pkg/data.bin"]

        info = sb.files.stat("work/proj/src/pkg/data.bin")
        assert (info.type, info.size) == ("file", 3 << 20)
        assert sb.files.stat("work/proj/latest").target == "src/main.py"
        with pytest.raises(SandboxFileNotFound):
            sb.files.stat("work/nope")

        assert sb.files.mkdir("a/b/c") is True
        assert sb.files.mkdir("a/b/c") is False, "already there, as mkdir -p"
        sb.files.move("work/proj/src/main.py", "a/b/c/main.py")
        assert sb.files.exists("a/b/c/main.py") and not sb.files.exists("work/proj/src/main.py")
        with pytest.raises(kruntimes.FunctionError) as refused:
            sb.files.move("a/b/c/main.py", "work")
        assert refused.value.type == "IsADirectoryError"
        with pytest.raises(kruntimes.FunctionError):
            sb.files.remove("a", recursive=False)
        assert sb.files.exists("a/b/c/main.py"), "a directory that is not empty stays"
        sb.files.remove("a")
        assert not sb.files.exists("a")

        # An archive with an entry out of the workspace is refused whole.
        import io
        import tarfile
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for name in ("fine.txt", "../../escape.txt"):
                data = b"x"
                member = tarfile.TarInfo(name)
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
        with pytest.raises(kruntimes.KruntimesError, match="leaves the directory") as e:
            sb.files.upload_tar("in", buf.getvalue())
        assert e.value.code == 400
        assert not sb.files.exists("in"), "nothing of it was extracted"
