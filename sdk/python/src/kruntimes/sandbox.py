"""Sandboxes: stateful code, commands and files on an exclusive Runtime Pod.

A sandbox is one function Run with the built-in handler
``kruntimes.sandbox`` of the Python Runtime Server (docs/sandbox.md): it
needs no source, its operations are invocations (authorized as
``create runs/invoke``, one at a time, sent once and never re-sent), its
idle timeout reclaims it and deleting it kills its processes and removes its
workspace::

    from kruntimes import Client
    from kruntimes.sandbox import Sandbox

    with Sandbox.create(Client(), runtime="sandbox") as sb:
        sb.run_code("x = 6 * 7")
        print(sb.run_code("x").result)                 # 42
        print(sb.commands.run("uname -a").stdout)
        sb.files.write("data.csv", "a,b\\n1,2\\n")
        print(sb.files.read("data.csv"))               # b'a,b\\n1,2\\n'
"""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Iterable, Iterator, Mapping, Sequence, Union
from urllib.parse import quote

import urllib3

from . import errors
from ._transport import _NOT_SENT, API_VERSION, GROUP, VERSION, runs_path
from .functions import MAX_INPUT_BYTES, EnvValue, Function, duration_string, env_list

if TYPE_CHECKING:
    from .client import Client

#: The handler a sandbox's Run names (runtimes/python.SandboxHandler).
HANDLER = "kruntimes.sandbox"
#: The largest file a sandbox writes or reads in one operation
#: (runtimes/python.SandboxMaxFileBytes): base64 keeps it within an invoke.
MAX_FILE_BYTES = 512 << 10

# What Files.upload reads from and Files.download writes to.
FileSource = Union[bytes, str, "os.PathLike[str]", BinaryIO]
FileDestination = Union["os.PathLike[str]", BinaryIO]

#: How much longer than an operation's own timeout the invocation may take:
#: the sandbox stops the operation itself and answers within that.
_ANSWER_MARGIN = 5.0


class SharedRuntime(errors.KruntimesError):
    """The Runtime lets several Runs share a Pod (``capacity.runs`` > 1), so a
    sandbox there would share its files and processes with other Runs. Pass
    ``shared=True`` to accept that. Nothing was created."""


class SandboxPathError(errors.FunctionError):
    """The sandbox refused a path that leaves its workspace (``..``, an
    absolute path elsewhere, or a symbolic link pointing out)."""


class SandboxFileNotFound(errors.FunctionError):
    """A file operation named a path that does not exist in the sandbox's
    workspace (the sandbox's ``FileNotFoundError``)."""


@dataclass(frozen=True)
class ExecutionError:
    """An exception raised by code in :meth:`Sandbox.run_code`."""

    name: str
    value: str
    traceback: str


@dataclass(frozen=True)
class Execution:
    """What :meth:`Sandbox.run_code` produced: ``result`` is the last
    expression's value (JSON, or its ``repr`` string when it is not JSON;
    None when the code ends with a statement); ``error`` is set when the
    code raised, and the sandbox stays usable."""

    stdout: str
    stderr: str
    result: Any
    error: ExecutionError | None
    stdout_truncated: bool = False
    stderr_truncated: bool = False


@dataclass(frozen=True)
class CommandResult:
    """What :meth:`Commands.run` produced. ``timed_out`` is True when the
    command ran past its timeout and was killed with every process it
    started; ``exit_code`` is then 137."""

    stdout: str
    stderr: str
    exit_code: int
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False


@dataclass(frozen=True)
class CommandInfo:
    """One command of :meth:`Commands.list`: ``exit_code`` is None while
    it runs."""

    id: str
    cmd: str | list[str]
    running: bool
    exit_code: int | None
    pid: int | None


#: The longest a single ``wait_command`` operation waits: well within an
#: invocation's default deadline (60 s); :meth:`CommandHandle.wait` sends
#: another one until the command ends or its own timeout passes.
_WAIT_SLICE = 45.0


class CommandHandle:
    """A command running in the background in a sandbox, as
    ``commands.run(..., background=True)`` starts it (or
    :meth:`Commands.connect` finds it): it runs until it exits, is killed,
    or the sandbox ends. Its output goes to the command's own log
    (``runs/log?command=ID``), which :meth:`stream` and the callbacks follow
    live and :meth:`output` reads as kept so far (the last 1 MiB)."""

    def __init__(self, sandbox: "Sandbox", id: str, pid: int | None,
                 on_stdout: Callable[[str], None] | None = None,
                 on_stderr: Callable[[str], None] | None = None) -> None:
        self._sandbox = sandbox
        self.id = id
        self.pid = pid
        self._followers: list[tuple[str, threading.Thread, list[str]]] = []
        for stream, callback in (("Stdout", on_stdout), ("Stderr", on_stderr)):
            if callback is not None:
                self._followers.append((stream, *self._follow_in_background(stream, callback)))

    def __repr__(self) -> str:
        return f"CommandHandle(sandbox={self._sandbox.name!r}, id={self.id!r}, pid={self.pid!r})"

    def _follow_in_background(self, stream: str, callback: Callable[[str], None]) -> tuple[threading.Thread, list[str]]:
        seen: list[str] = []
        # The follow is open before the thread starts: a line written
        # meanwhile is not missed, and a command that is gone fails here.
        lines = self.stream(stream)

        def follow() -> None:
            for line in lines:
                seen.append(line)
                callback(line)

        t = threading.Thread(target=follow, name=f"kruntimes-command-{self.id}-{stream.lower()}", daemon=True)
        t.start()
        return t, seen

    def stream(self, stream: str = "All") -> Iterator[str]:
        """Yields the command's output line by line as it is written,
        from the start of what is kept, until the command ends. ``stream``
        picks ``Stdout`` or ``Stderr``; ``All`` interleaves them in write
        order."""
        return self._read(stream, follow=True)

    def output(self, stream: str = "All") -> str:
        """What the command wrote so far (its log keeps the last 1 MiB)."""
        return "".join(self._read(stream, follow=False))

    def _read(self, stream: str, follow: bool) -> Iterator[str]:
        sb = self._sandbox
        query: dict[str, Any] = {"command": self.id, "stream": stream, "follow": "true" if follow else None}
        transport = sb.function._client._transport
        resp = transport.send("GET", runs_path(sb.namespace, sb.name, "log"), query=query, stream=True,
                              timeout=urllib3.Timeout(connect=30, read=None))
        if resp.code != 200:
            resp.body = resp.raw.read()
            resp.raw.release_conn()
            raise errors.error_for(resp.code, resp.headers, resp.status(), run=sb.name)
        return _lines(resp)

    def wait(self, timeout: float | None = None) -> CommandResult:
        """Waits for the command to end and returns its exit code and
        output (what the callbacks got, or else what its log kept). With
        ``timeout`` (seconds) it raises :class:`TimeoutError` when the
        command still runs then; the command goes on."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _WAIT_SLICE if deadline is None else min(_WAIT_SLICE, deadline - time.monotonic())
            out = self._sandbox._call({"op": "wait_command", "id": self.id, "timeout": max(left, 0.001)}, left)
            if not out.get("running"):
                break
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"command {self.id} of sandbox {self._sandbox.name} still runs after {timeout} s")
        streams: dict[str, str] = {}
        for stream, t, seen in self._followers:
            # The follow ends right after the command: its log closes then.
            t.join(timeout=30)
            streams[stream] = "".join(seen)
        stdout = streams["Stdout"] if "Stdout" in streams else self.output("Stdout")
        stderr = streams["Stderr"] if "Stderr" in streams else self.output("Stderr")
        code = out.get("exit_code")
        return CommandResult(stdout=stdout, stderr=stderr, exit_code=-1 if code is None else int(code),
                             timed_out=bool(out.get("timed_out")))

    def kill(self, signal: str | int | None = None) -> None:
        """Kills the command and every process it started; with
        ``signal`` (a name such as ``"SIGINT"`` or a number) sends only that
        signal to the command's process group."""
        request: dict[str, Any] = {"op": "kill_command", "id": self.id}
        if signal is not None:
            request["signal"] = signal
        self._sandbox._call(request)

    def send_stdin(self, data: str | bytes, eof: bool = False) -> None:
        """Writes ``data`` to the command's stdin (started with
        ``stdin=True``); ``eof`` closes it after."""
        request: dict[str, Any] = {"op": "write_stdin", "id": self.id, "eof": eof}
        if isinstance(data, str):
            request["data"] = data
        else:
            request["data_b64"] = base64.b64encode(data).decode()
        self._sandbox._call(request)


def _lines(resp: Any) -> Iterator[str]:
    """The lines of a streamed answer, as they arrive."""
    try:
        pending = b""
        for chunk in resp.raw.stream(4096, decode_content=True):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", errors="replace") + "\n"
        if pending:
            yield pending.decode("utf-8", errors="replace")
    finally:
        # A follow stopped early has unread data: never reuse its connection.
        resp.raw.close()
        resp.raw.release_conn()


@dataclass(frozen=True)
class EntryInfo:
    """One entry of :meth:`Files.list` (``name`` relative to the directory
    listed) or what :meth:`Files.stat` found (``name`` the path asked).
    ``type`` is ``file``, ``dir``, ``symlink`` or ``other``; ``mode`` the
    permission bits (``0o644``); ``mtime`` the modification time in seconds
    since the epoch; ``target`` a symbolic link's target (from
    :meth:`Files.stat`). Equality compares name, type and size."""

    name: str
    type: str
    size: int
    mode: int = field(default=0, compare=False)
    mtime: float = field(default=0.0, compare=False)
    target: str | None = field(default=None, compare=False)


class EntryList(list):  # type: ignore[type-arg]
    """The entries :meth:`Files.list` answers; ``truncated`` says there were
    more than it answered (``max_entries``, at most 1000)."""

    truncated: bool = False


@dataclass(frozen=True)
class Extracted:
    """What :meth:`Files.upload_tar` and :meth:`Files.upload_dir` extracted
    into ``path``: the regular files (hard links included) and their
    bytes."""

    path: str
    files: int
    bytes: int


@dataclass(frozen=True)
class Downloaded:
    """What :meth:`Files.download_dir` extracted into ``local_dir``: the
    regular files and their bytes, and the names of the entries it left
    out as unsafe (a link that leads outside ``local_dir``, an absolute
    name), which the sandbox holds but ``local_dir`` does not."""

    local_dir: str
    files: int
    bytes: int
    skipped: tuple[str, ...] = ()


def _entry(e: Mapping[str, Any], name: str | None = None) -> EntryInfo:
    return EntryInfo(name if name is not None else e["name"], e["type"], int(e.get("size", 0)),
                     mode=int(e.get("mode", 0)), mtime=float(e.get("mtime", 0.0)), target=e.get("target"))


def runtimes_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace, safe='')}/runtimes"
    return path + "/" + quote(name, safe="") if name else path


class Sandbox:
    """One sandbox: a function Run with the handler ``kruntimes.sandbox``.

    Make one with :meth:`create` (which owns the Run: ``close()`` or the end
    of a ``with`` block deletes it, even when the block raises) or attach to
    an existing one with :meth:`connect`.
    """

    def __init__(self, function: Function, *, owned: bool) -> None:
        self.function = function
        self._owned = owned
        self._closed = False
        self.commands = Commands(self)
        self.files = Files(self)

    @classmethod
    def create(
        cls,
        client: "Client",
        runtime: str = "python",
        *,
        idle_timeout: int | None = 300,
        timeout: float | str | None = None,
        env: Mapping[str, EnvValue] | None = None,
        shared: bool = False,
        name: str | None = None,
        generate_name: str = "sandbox-",
        labels: Mapping[str, str] | None = None,
        ready_timeout: float = 120.0,
        namespace: str | None = None,
    ) -> "Sandbox":
        """Creates a sandbox on ``runtime`` and waits until it is Ready.

        The Runtime must give each Run a Pod of its own (``capacity.runs``
        1), else :class:`SharedRuntime` is raised before anything is created,
        unless ``shared=True``. ``idle_timeout`` (seconds) ends the sandbox
        after that long without an operation, ``timeout`` (seconds or a
        duration such as ``"1h"``) bounds its whole life; ``env`` is the
        environment of its code and commands. If it does not become Ready
        (:class:`kruntimes.RunEnded`, :class:`kruntimes.WaitTimeout`), the Run
        is deleted and the error raised.
        """
        ns = namespace or client.namespace
        rt = client._transport.call("GET", runtimes_path(ns, runtime))
        capacity = int(((rt.get("spec") or {}).get("capacity") or {}).get("runs") or 1)
        if capacity != 1 and not shared:
            raise SharedRuntime(
                f"Runtime {runtime} has capacity.runs {capacity}: a sandbox there shares its Pod, files and processes "
                "with other Runs; use a Runtime with capacity.runs 1, or pass shared=True")
        metadata: dict[str, Any] = {"labels": dict(labels or {})}
        if name:
            metadata["name"] = name
        else:
            metadata["generateName"] = generate_name
        function: dict[str, Any] = {"handler": HANDLER}
        if idle_timeout is not None:
            function["idleTimeoutSeconds"] = int(idle_timeout)
        spec: dict[str, Any] = {"runtime": runtime, "mode": {"function": function}}
        if env:
            spec["env"] = env_list(env)
        if timeout is not None:
            spec["timeout"] = duration_string(timeout)
        run = client._transport.call("POST", runs_path(ns), run=name,
                                     obj={"apiVersion": API_VERSION, "kind": "Run", "metadata": metadata, "spec": spec})
        sandbox = cls(Function(client, run, owned=True), owned=True)
        try:
            sandbox.function.wait_ready(ready_timeout)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    @classmethod
    def connect(cls, client: "Client", name: str, *, namespace: str | None = None) -> "Sandbox":
        """Attaches to the existing sandbox Run ``name``; ``close()`` leaves
        it alone (call :meth:`delete` to end it)."""
        fn = client.functions.get(name, namespace=namespace)
        handler = ((fn.run.get("spec") or {}).get("mode") or {}).get("function", {}).get("handler")
        if handler != HANDLER:
            raise errors.KruntimesError(f"Run {name} is not a sandbox: its handler is {handler!r}, not {HANDLER!r}",
                                        run=name)
        return cls(fn, owned=False)

    @property
    def name(self) -> str:
        """The name of the sandbox's Run."""
        return self.function.name

    @property
    def namespace(self) -> str:
        return self.function.namespace

    def __repr__(self) -> str:
        return f"Sandbox({self.namespace}/{self.name})"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Deletes the sandbox's Run if this handle created it (its processes
        are killed and its workspace removed); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._owned:
            self.function.delete()

    def delete(self) -> None:
        """Deletes the sandbox's Run, whoever created it."""
        self._closed = True
        self.function.delete()

    def run_code(self, code: str, timeout: float | None = None) -> Execution:
        """Runs Python ``code`` in the sandbox's persistent namespace.

        Variables, imports and functions stay between calls; the last
        expression's value is the result. An exception in the code is
        returned in ``error`` (with its traceback), not raised. ``timeout``
        (seconds) interrupts code still running then with a
        ``SandboxTimeout`` error.
        """
        out = self._call({"op": "run_code", "code": code, "timeout": timeout}, timeout)
        err = out.get("error")
        return Execution(
            stdout=out.get("stdout", ""),
            stderr=out.get("stderr", ""),
            result=out.get("result"),
            error=ExecutionError(err.get("name", ""), err.get("value", ""), err.get("traceback", "")) if err else None,
            stdout_truncated=bool(out.get("stdout_truncated")),
            stderr_truncated=bool(out.get("stderr_truncated")),
        )

    def _call(self, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Sends one operation, once, and returns its answer."""
        if self._closed:
            raise errors.KruntimesError(f"sandbox {self.name} is closed", run=self.name)
        body = json.dumps(request).encode()
        if len(body) > MAX_INPUT_BYTES:
            raise errors.PayloadTooLarge(
                f"the {request['op']} request is {len(body)} bytes, over the {MAX_INPUT_BYTES}-byte limit of an "
                "invocation; it was not sent", code=413, run=self.name)
        try:
            result = self.function.invoke(request, timeout=None if timeout is None else timeout + _ANSWER_MARGIN)
        except errors.FunctionError as e:
            typed = {"SandboxPathError": SandboxPathError, "FileNotFoundError": SandboxFileNotFound}.get(e.type)
            if typed is not None:
                raise typed(e.type, e.error_message, result=e.result, code=e.code, run=e.run,
                            invocation_id=e.invocation_id) from None
            raise
        return result.output if isinstance(result.output, dict) else {}


class Commands:
    """``sandbox.commands``: programs in the sandbox."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def run(self, cmd: str | Sequence[str], timeout: float | None = None, env: Mapping[str, str] | None = None,
            cwd: str | None = None, *, background: bool = False, stdin: bool = False,
            on_stdout: Callable[[str], None] | None = None,
            on_stderr: Callable[[str], None] | None = None) -> Any:
        """Runs ``cmd`` — a string through ``/bin/sh -c``, or an argv list —
        in the workspace (or ``cwd``, a workspace path) with ``env`` added.

        At ``timeout`` seconds the command and every process it started are
        killed and the result says ``timed_out``; the sandbox stays usable.
        A non-zero exit is a result, not an exception.

        ``on_stdout`` and ``on_stderr`` get each line as the command writes
        it (in a thread of their own); the result then carries everything
        it wrote. With ``background=True`` the call returns a
        :class:`CommandHandle` at once (``stdin=True`` keeps its stdin open
        for :meth:`CommandHandle.send_stdin`).
        """
        if background or stdin or on_stdout is not None or on_stderr is not None:
            handle = self.start(cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin,
                                on_stdout=on_stdout, on_stderr=on_stderr)
            return handle if background else handle.wait()
        request: dict[str, Any] = {"op": "run_command", "cmd": cmd if isinstance(cmd, str) else list(cmd),
                                   "timeout": timeout, "env": dict(env or {}), "cwd": cwd}
        out = self._sandbox._call(request, timeout)
        return CommandResult(
            stdout=out.get("stdout", ""),
            stderr=out.get("stderr", ""),
            exit_code=int(out.get("exit_code", -1)),
            timed_out=bool(out.get("timed_out")),
            stdout_truncated=bool(out.get("stdout_truncated")),
            stderr_truncated=bool(out.get("stderr_truncated")),
        )


    def start(self, cmd: str | Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
              cwd: str | None = None, stdin: bool = False, on_stdout: Callable[[str], None] | None = None,
              on_stderr: Callable[[str], None] | None = None) -> CommandHandle:
        """Starts ``cmd`` in the background and returns its handle at once;
        see :meth:`run`. Without ``timeout`` it runs until it exits, is
        killed, or the sandbox ends."""
        request: dict[str, Any] = {"op": "start_command", "cmd": cmd if isinstance(cmd, str) else list(cmd),
                                   "timeout": timeout, "env": dict(env or {}), "cwd": cwd, "stdin": stdin}
        out = self._sandbox._call(request)
        pid = out.get("pid")
        return CommandHandle(self._sandbox, str(out["id"]), None if pid is None else int(pid),
                             on_stdout=on_stdout, on_stderr=on_stderr)

    def connect(self, id: str, on_stdout: Callable[[str], None] | None = None,
                on_stderr: Callable[[str], None] | None = None) -> CommandHandle:
        """The handle of command ``id``, started earlier (by this or another
        client); the callbacks get its output from the start of what is
        kept."""
        for c in self.list():
            if c.id == id:
                return CommandHandle(self._sandbox, id, c.pid, on_stdout=on_stdout, on_stderr=on_stderr)
        raise errors.NotFound(f"sandbox {self._sandbox.name} has no command {id!r}", code=404, run=self._sandbox.name)

    def list(self) -> list[CommandInfo]:
        """The sandbox's commands, running and recently ended, in start order."""
        out = self._sandbox._call({"op": "list_commands"})
        return [CommandInfo(id=str(c["id"]), cmd=c.get("cmd", ""), running=bool(c.get("running")),
                            exit_code=c.get("exit_code"), pid=c.get("pid")) for c in out.get("commands", [])]


class Files:
    """``sandbox.files``: files in the sandbox's workspace. Paths are relative
    to it (or absolute inside it); the sandbox refuses any other with
    :class:`SandboxPathError`."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def write(self, path: str, data: bytes | str) -> None:
        """Writes ``data`` (a ``str`` as UTF-8) to ``path``, creating its
        directories. Over 512 KiB raises :class:`kruntimes.PayloadTooLarge`
        before anything is sent."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        if len(raw) > MAX_FILE_BYTES:
            raise errors.PayloadTooLarge(
                f"{path} has {len(raw)} bytes, over the {MAX_FILE_BYTES}-byte limit of a sandbox file operation; "
                "it was not sent", code=413, run=self._sandbox.name)
        self._sandbox._call({"op": "write_file", "path": path, "data_b64": base64.b64encode(raw).decode("ascii")})

    def read(self, path: str) -> bytes:
        """The contents of the file ``path`` (at most 512 KiB)."""
        out = self._sandbox._call({"op": "read_file", "path": path})
        return base64.b64decode(out.get("data_b64", ""))

    def upload(self, path: str, src: FileSource, *, timeout: float | None = None) -> int:
        """Streams ``src`` into the file ``path``, of any size, and returns the
        size written: ``bytes``, a ``str`` (as UTF-8), a path-like naming a
        local file, or a binary file object read to its end. Sent in chunks
        as it is read (``PUT runs/NAME/files``, authorized as
        ``update runs/files``), never held whole; missing directories are
        made, and the file is replaced only once all of it arrived: an
        upload that fails leaves the old file. ``timeout`` bounds the wait
        for each read of the answer (none by default)."""
        return int(self._put(path, src, timeout=timeout).get("size", 0))

    def _put(self, path: str, src: FileSource, *, timeout: float | None, extract: str | None = None) -> dict[str, Any]:
        """PUTs src to runs/NAME/files, streamed, and returns the answer."""
        sb = self._sandbox
        if isinstance(src, str):
            src = src.encode()
        if isinstance(src, (bytes, bytearray, memoryview)):
            chunks: Iterable[bytes] = _bytes_chunks(bytes(src))
            opened = None
        elif isinstance(src, (os.PathLike,)):
            opened = open(src, "rb")
            chunks = _file_chunks(opened)
        elif hasattr(src, "read"):
            opened = None
            chunks = _file_chunks(src)
        elif hasattr(src, "__next__"):
            opened = None  # upload_dir's archive, as it is made
            chunks = src
        else:
            raise TypeError(f"upload takes bytes, str, a path-like or a binary file object, not {type(src).__name__}")
        try:
            resp = self._send("PUT", path, body=chunks, timeout=timeout, extract=extract,
                              headers={"Content-Type": "application/octet-stream"})
        finally:
            if opened is not None:
                opened.close()
        if resp.code >= 300:
            raise errors.error_for(resp.code, resp.headers, resp.status(), run=sb.name)
        return resp.json()

    def upload_tar(self, path: str, src: FileSource, *, timeout: float | None = None) -> Extracted:
        """Streams the tar archive ``src`` (gzip-compressed or not: bytes, a
        path-like naming a local file, or a binary file object) into the
        sandbox, which extracts it into the directory ``path`` (made when
        missing; ``"."`` is the workspace) as ``tar -x -C path`` would:
        merged with what is there, files of the same name replaced
        (``PUT runs/NAME/files?extract=tar``, ``update runs/files``).

        The archive is extracted aside and moved in only once all of it
        arrived: an archive that is refused (an entry that leaves the
        workspace by ``..``, an absolute name or a link, a device, a
        directory where ``path`` has a file) or breaks off leaves nothing."""
        out = self._put(path, src, timeout=timeout, extract="tar")
        return Extracted(str(out.get("path", path)), int(out.get("files", 0)), int(out.get("bytes", 0)))

    def upload_dir(self, local_dir: str | os.PathLike[str], path: str, *, timeout: float | None = None) -> Extracted:
        """Uploads the local directory ``local_dir``'s contents into the
        directory ``path`` of the sandbox, as :meth:`upload_tar`: tarred on
        the fly and streamed, never held whole. Symbolic links are sent as
        links: one that leads outside the sandbox's workspace refuses the
        upload."""
        local = os.fspath(local_dir)
        if not os.path.isdir(local):
            raise NotADirectoryError(f"{local} is not a local directory")
        r, w = os.pipe()
        failure: list[BaseException] = []

        def produce() -> None:
            try:
                with os.fdopen(w, "wb") as out, tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                    tar.add(local, arcname=".")
            except BrokenPipeError:
                pass  # the upload ended first; its error is the one to raise
            except BaseException as e:  # noqa: B902 -- handed to the caller
                failure.append(e)

        producer = threading.Thread(target=produce, name="kruntimes-upload-dir", daemon=True)
        reader = os.fdopen(r, "rb")
        producer.start()
        try:

            def chunks() -> Iterator[bytes]:
                yield from _file_chunks(reader)
                # The archive must be whole: a local error is the caller's,
                # and breaking the stream makes the sandbox drop it.
                producer.join()
                if failure:
                    raise failure[0]

            try:
                return self.upload_tar(path, chunks(), timeout=timeout)  # type: ignore[arg-type]
            except Exception as e:
                if failure:
                    raise failure[0] from e
                raise
        finally:
            reader.close()
            producer.join()

    def download(self, path: str, dst: FileDestination | None = None, *, timeout: float | None = None) -> bytes | int:
        """The file ``path``, of any size (``GET runs/NAME/files``, authorized
        as ``get runs/files``): its bytes when ``dst`` is None, else streamed
        into ``dst`` — a path-like (written whole, or not at all) or a binary
        file object — and its size returned. ``timeout`` bounds the wait for
        each read (none by default)."""
        sb = self._sandbox
        resp = self._send("GET", path, stream=True, timeout=timeout)
        try:
            if resp.code != 200:
                resp.body = resp.raw.read()
                raise errors.error_for(resp.code, resp.headers, resp.status(), run=sb.name)
            if dst is not None:
                return self._write_to(path, resp, dst)
            return resp.raw.read()
        except urllib3.exceptions.HTTPError as e:
            err = errors.KruntimesError(f"download of {path} from sandbox {sb.name} broke off: {e}", run=sb.name)
            err.not_run = False
            raise err from e
        finally:
            resp.raw.close()
            resp.raw.release_conn()

    def download_tar(self, path: str, dst: FileDestination | None = None, *, gzip: bool = False,
                     timeout: float | None = None) -> Iterator[bytes] | int:
        """The directory ``path`` as a tar archive (gzip-compressed with
        ``gzip``), written by the sandbox as it walks the directory
        (``GET runs/NAME/files?archive=tar``, ``get runs/files``): entries
        relative to ``path``, depth first; directories, regular files (mode
        and modification time kept) and symbolic links, stored as links and
        never followed; sockets, FIFOs and devices left out.

        With ``dst`` None, an iterator of the archive's chunks (consume it
        to the end, or close it); else streamed into ``dst`` — a path-like
        (written whole, or not at all) or a binary file object — and the
        archive's size returned. A missing ``path`` raises
        :class:`kruntimes.NotFound` before any byte; a stream that breaks
        off (a file that shrank while it was read) raises
        :class:`kruntimes.KruntimesError`, and what was received is an
        archive cut short. ``timeout`` bounds the wait for each read."""
        resp = self._open_archive(path, gzip, timeout)
        if dst is None:
            return self._archive_chunks(path, resp)
        try:
            return self._write_to(path, resp, dst)
        finally:
            resp.raw.close()
            resp.raw.release_conn()

    def download_dir(self, path: str, local_dir: str | os.PathLike[str], *, timeout: float | None = None) -> Downloaded:
        """Downloads the directory ``path`` of the sandbox into the local
        directory ``local_dir`` (made when missing), as :meth:`download_tar`
        streams it, extracted as it arrives, never held whole. Extraction
        follows ``tarfile``'s ``data`` filter: an entry whose name or link
        leaves ``local_dir`` is skipped (and named in ``skipped``), modes
        lose setuid, setgid and write for others, owners are not kept."""
        dest = os.path.realpath(os.fspath(local_dir))
        os.makedirs(dest, exist_ok=True)
        resp = self._open_archive(path, False, timeout)
        files = size = 0
        skipped: list[str] = []
        try:
            with tarfile.open(fileobj=_RawReader(resp), mode="r|") as tar:
                for member in tar:
                    if not _safe_member(member, dest):
                        skipped.append(member.name)
                        continue
                    if hasattr(tarfile, "data_filter"):
                        tar.extract(member, dest, filter="data")
                    else:
                        tar.extract(member, dest)
                    if member.isreg():
                        files, size = files + 1, size + member.size
        except (urllib3.exceptions.HTTPError, tarfile.ReadError) as e:
            sb = self._sandbox
            err = errors.KruntimesError(f"download of {path} from sandbox {sb.name} broke off: {e}; "
                                        f"{local_dir} holds part of it", run=sb.name)
            err.not_run = False
            raise err from e
        finally:
            resp.raw.close()
            resp.raw.release_conn()
        return Downloaded(os.fspath(local_dir), files, size, tuple(skipped))

    def _open_archive(self, path: str, gzip: bool, timeout: float | None) -> Any:
        sb = self._sandbox
        resp = self._send("GET", path, stream=True, timeout=timeout, archive="tar.gz" if gzip else "tar")
        if resp.code != 200:
            try:
                resp.body = resp.raw.read()
            finally:
                resp.raw.close()
                resp.raw.release_conn()
            raise errors.error_for(resp.code, resp.headers, resp.status(), run=sb.name)
        return resp

    def _archive_chunks(self, path: str, resp: Any) -> Iterator[bytes]:
        try:
            yield from resp.raw.stream(_CHUNK_BYTES, decode_content=True)
        except urllib3.exceptions.HTTPError as e:
            sb = self._sandbox
            err = errors.KruntimesError(f"download of {path} from sandbox {sb.name} broke off: {e}", run=sb.name)
            err.not_run = False
            raise err from e
        finally:
            resp.raw.close()
            resp.raw.release_conn()

    def _write_to(self, path: str, resp: Any, dst: FileDestination) -> int:
        sb = self._sandbox
        try:
            if isinstance(dst, os.PathLike):
                # A local file that is whole or absent: written aside, then
                # renamed into place.
                target = os.fspath(dst)
                tmp = f"{target}.kruntimes-download-{os.getpid()}"
                try:
                    with open(tmp, "wb") as f:
                        size = _copy(resp, f)
                    os.replace(tmp, target)
                except BaseException:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                    raise
                return size
            return _copy(resp, dst)
        except urllib3.exceptions.HTTPError as e:
            err = errors.KruntimesError(f"download of {path} from sandbox {sb.name} broke off: {e}", run=sb.name)
            err.not_run = False
            raise err from e

    def _send(self, method: str, path: str, **kw: Any) -> Any:
        sb = self._sandbox
        if sb._closed:
            raise errors.KruntimesError(f"sandbox {sb.name} is closed", run=sb.name)
        timeout = kw.pop("timeout", None)
        extract = kw.pop("extract", None)
        archive = kw.pop("archive", None)
        transport = sb.function._client._transport
        try:
            return transport.send(method, runs_path(sb.namespace, sb.name, "files"),
                                  query={"path": path, "extract": extract, "archive": archive},
                                  timeout=urllib3.Timeout(connect=30, read=timeout), **kw)
        except _NOT_SENT as e:
            raise errors.ConnectFailed(f"cannot connect to {transport.host}: {e}", run=sb.name) from e
        except urllib3.exceptions.HTTPError as e:
            err = errors.KruntimesError(f"{method} {path} of sandbox {sb.name}: {e}", run=sb.name)
            err.not_run = False
            raise err from e

    def list(self, path: str = ".", *, recursive: bool = False, max_entries: int | None = None) -> EntryList:
        """The entries of the directory ``path``, by name; with
        ``recursive``, of its whole tree, depth first (a directory followed
        by its own entries, names relative to ``path``; links are listed,
        not followed). At most ``max_entries`` (and never more than 1000)
        come back: the list's ``truncated`` then says there were more."""
        request: dict[str, Any] = {"op": "list_files", "path": path, "recursive": recursive}
        if max_entries is not None:
            request["max_entries"] = max_entries
        out = self._sandbox._call(request)
        entries = EntryList(_entry(e) for e in out.get("entries") or [])
        entries.truncated = bool(out.get("truncated"))
        return entries

    def stat(self, path: str) -> EntryInfo:
        """What ``path`` is (a symbolic link as itself, with its
        ``target``); :class:`SandboxFileNotFound` when it does not exist."""
        out = self._sandbox._call({"op": "stat", "path": path})
        return _entry(out, name=path)

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (a symbolic link counts as itself)."""
        return bool(self._sandbox._call({"op": "exists", "path": path}).get("exists"))

    def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> bool:
        """Makes the directory ``path`` (by default as ``mkdir -p``: missing
        parents too, one already there is fine) and says whether it made
        it. Without ``parents`` a missing parent raises
        :class:`SandboxFileNotFound`; without ``exist_ok`` an existing one
        raises a ``FileExistsError`` :class:`kruntimes.FunctionError`."""
        out = self._sandbox._call({"op": "mkdir", "path": path, "parents": parents, "exist_ok": exist_ok})
        return bool(out.get("created"))

    def move(self, src: str, dst: str) -> None:
        """Renames ``src`` to ``dst`` in the workspace, atomically: a file
        or link at ``dst`` is replaced, a directory there is refused
        (``IsADirectoryError``); links are moved, not followed; ``dst``'s
        directory must exist."""
        self._sandbox._call({"op": "move", "src": src, "dst": dst})

    def remove(self, path: str, *, recursive: bool = True) -> None:
        """Removes the file, link or directory ``path``: a directory with
        its contents, or, with ``recursive=False``, only when it is empty."""
        self._sandbox._call({"op": "remove", "path": path, "recursive": recursive})


# A chunk of an upload or a download: what the client holds of a file.
_CHUNK_BYTES = 256 << 10


def _bytes_chunks(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for i in range(0, len(data), _CHUNK_BYTES):
        yield bytes(view[i:i + _CHUNK_BYTES])


def _file_chunks(f: Any) -> Iterator[bytes]:
    while chunk := f.read(_CHUNK_BYTES):
        yield bytes(chunk)


class _RawReader(io.RawIOBase):
    """A response's body as a file object for ``tarfile``'s stream mode."""

    def __init__(self, resp: Any) -> None:
        self._chunks = resp.raw.stream(_CHUNK_BYTES, decode_content=True)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._pending:
            self._pending = next(self._chunks, b"")
            if not self._pending:
                return 0
        n = min(len(b), len(self._pending))
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def _inside(dest: str, p: str) -> bool:
    return os.path.commonpath([dest, os.path.realpath(p)]) == dest


def _safe_member(member: tarfile.TarInfo, dest: str) -> bool:
    """Whether member lands inside dest, as tarfile's ``data`` filter
    judges (on Pythons without it too): no absolute name, nothing out by
    ``..`` or through a link, only files, directories and links, modes
    without setuid, setgid or write for others, no owner."""
    name = member.name
    if os.path.isabs(name) or not _inside(dest, os.path.join(dest, name)):
        return False
    if member.issym():
        if os.path.isabs(member.linkname) or not _inside(
                dest, os.path.join(dest, os.path.dirname(name), member.linkname)):
            return False
    elif member.islnk():
        if os.path.isabs(member.linkname) or not _inside(dest, os.path.join(dest, member.linkname)):
            return False
    elif not (member.isreg() or member.isdir()):
        return False
    member.mode &= 0o755
    if member.isdir():
        member.mode |= 0o700  # its entries go in after it
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return True


def _copy(resp: Any, dst: Any) -> int:
    size = 0
    for chunk in resp.raw.stream(_CHUNK_BYTES, decode_content=True):
        dst.write(chunk)
        size += len(chunk)
    return size
