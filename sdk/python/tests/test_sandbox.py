"""Sandboxes through the SDK against a real cluster: a function Run with the
built-in handler kruntimes.sandbox on a Runtime of capacity 1."""

from __future__ import annotations

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
