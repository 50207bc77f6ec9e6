"""The asyncio client: the shape of :mod:`kruntimes`, with ``async`` methods.

Each call runs the synchronous SDK in a worker thread
(``asyncio.to_thread``, the event loop's default thread pool), so it blocks
no event loop and keeps the same guarantees: an invocation is sent at most
once unless a :class:`kruntimes.Retry` allows re-sending (a 429,
kruntimes' own 503, an unknown outcome with ``unknown=True``). Cancelling
an awaiting task does not stop a request that was already sent.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any, AsyncIterator, Mapping, Sequence

from . import client as sync_client
from . import functions as sync_functions
from . import sandbox as sync_sandbox
from . import tasks as sync_tasks
from .functions import InvokeResult
from .retry import Retry
from .sandbox import CommandInfo, CommandResult, Downloaded, EntryInfo, EntryList, Execution, Extracted
from .tasks import TaskResult


class Function:
    """The async handle on a function Run; ``async with`` deletes what
    ``create`` made."""

    def __init__(self, function: sync_functions.Function) -> None:
        self.sync = function

    @property
    def name(self) -> str:
        return self.sync.name

    @property
    def run(self) -> dict[str, Any]:
        return self.sync.run

    async def __aenter__(self) -> "Function":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.sync._owned:
            await self.delete()

    async def wait_ready(self, timeout: float = 120.0) -> "Function":
        await asyncio.to_thread(self.sync.wait_ready, timeout)
        return self

    async def invoke(self, input: Any = None, *, invocation_id: str | None = None, timeout: float | None = None,
                     retry: Retry | None = None) -> InvokeResult:
        return await asyncio.to_thread(self.sync.invoke, input, invocation_id=invocation_id, timeout=timeout,
                                       retry=retry)

    async def refresh(self) -> "Function":
        await asyncio.to_thread(self.sync.refresh)
        return self

    async def delete(self) -> None:
        await asyncio.to_thread(self.sync.delete)


class Functions:
    def __init__(self, functions: sync_functions.Functions) -> None:
        self._sync = functions

    async def create(self, name: str | None = None, *, runtime: str, source: str | pathlib.Path, handler: str,
                     **kw: Any) -> Function:
        return Function(await asyncio.to_thread(self._sync.create, name, runtime=runtime, source=source,
                                                handler=handler, **kw))

    async def get(self, name: str, **kw: Any) -> Function:
        return Function(await asyncio.to_thread(self._sync.get, name, **kw))

    async def list(self, labels: Mapping[str, str] | str | None = None, **kw: Any) -> list[Function]:
        return [Function(f) for f in await asyncio.to_thread(self._sync.list, labels, **kw)]


class Task:
    def __init__(self, task: sync_tasks.Task) -> None:
        self.sync = task

    @property
    def name(self) -> str:
        return self.sync.name

    async def wait(self, timeout: float | None = None) -> TaskResult:
        return await asyncio.to_thread(self.sync.wait, timeout)

    async def cancel(self) -> None:
        await asyncio.to_thread(self.sync.cancel)

    async def logs(self, follow: bool = False, **kw: Any) -> AsyncIterator[str]:
        # Line by line, each read in the thread pool: a follow stays live.
        lines = self.sync.logs(follow, **kw)
        done = object()
        while (line := await asyncio.to_thread(next, lines, done)) is not done:
            yield line

    async def delete(self) -> None:
        await asyncio.to_thread(self.sync.delete)


class Tasks:
    def __init__(self, tasks: sync_tasks.Tasks) -> None:
        self._sync = tasks

    async def run(self, runtime: str, *, script: str | None = None, entrypoint: str | None = None,
                  args: Sequence[str] = (), wait: bool = True, **kw: Any) -> TaskResult | Task:
        out = await asyncio.to_thread(self._sync.run, runtime, script=script, entrypoint=entrypoint, args=args,
                                      wait=wait, **kw)
        return Task(out) if isinstance(out, sync_tasks.Task) else out

    async def get(self, name: str, **kw: Any) -> Task:
        return Task(await asyncio.to_thread(self._sync.get, name, **kw))


class Sandbox:
    """The async handle on a sandbox; ``async with`` deletes it."""

    def __init__(self, sandbox: sync_sandbox.Sandbox) -> None:
        self.sync = sandbox
        self.commands = Commands(sandbox.commands)
        self.files = Files(sandbox.files)

    @property
    def name(self) -> str:
        return self.sync.name

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def run_code(self, code: str, timeout: float | None = None) -> Execution:
        return await asyncio.to_thread(self.sync.run_code, code, timeout)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)


class Commands:
    def __init__(self, commands: sync_sandbox.Commands) -> None:
        self._sync = commands

    async def run(self, cmd: str | Sequence[str], timeout: float | None = None, **kw: Any) -> Any:
        """As the synchronous ``run``; ``background=True`` returns a
        :class:`CommandHandle`. Callbacks are called in threads of their own."""
        out = await asyncio.to_thread(self._sync.run, cmd, timeout, **kw)
        return CommandHandle(out) if isinstance(out, sync_sandbox.CommandHandle) else out

    async def start(self, cmd: str | Sequence[str], **kw: Any) -> "CommandHandle":
        return CommandHandle(await asyncio.to_thread(self._sync.start, cmd, **kw))

    async def connect(self, id: str, **kw: Any) -> "CommandHandle":
        return CommandHandle(await asyncio.to_thread(self._sync.connect, id, **kw))

    async def list(self) -> list[CommandInfo]:
        return await asyncio.to_thread(self._sync.list)


class CommandHandle:
    """The async handle on a background command."""

    def __init__(self, handle: sync_sandbox.CommandHandle) -> None:
        self.sync = handle
        self.id = handle.id
        self.pid = handle.pid

    async def wait(self, timeout: float | None = None) -> CommandResult:
        return await asyncio.to_thread(self.sync.wait, timeout)

    async def kill(self, signal: str | int | None = None) -> None:
        await asyncio.to_thread(self.sync.kill, signal)

    async def send_stdin(self, data: str | bytes, eof: bool = False) -> None:
        await asyncio.to_thread(self.sync.send_stdin, data, eof)

    async def output(self, stream: str = "All") -> str:
        return await asyncio.to_thread(self.sync.output, stream)

    async def stream(self, stream: str = "All") -> AsyncIterator[str]:
        """The command's lines as they are written, until it ends."""
        lines = await asyncio.to_thread(self.sync.stream, stream)
        end = object()
        while True:
            line = await asyncio.to_thread(next, lines, end)
            if line is end:
                return
            yield line


class Files:
    def __init__(self, files: sync_sandbox.Files) -> None:
        self._sync = files

    async def write(self, path: str, data: bytes | str) -> None:
        await asyncio.to_thread(self._sync.write, path, data)

    async def read(self, path: str) -> bytes:
        return await asyncio.to_thread(self._sync.read, path)

    async def upload(self, path: str, src: Any, *, timeout: float | None = None) -> int:
        """As :meth:`kruntimes.sandbox.Files.upload`, in a worker thread: a
        file object ``src`` is read there."""
        return await asyncio.to_thread(self._sync.upload, path, src, timeout=timeout)

    async def download(self, path: str, dst: Any = None, *, timeout: float | None = None) -> bytes | int:
        """As :meth:`kruntimes.sandbox.Files.download`, in a worker thread."""
        return await asyncio.to_thread(self._sync.download, path, dst, timeout=timeout)

    async def download_tar(self, path: str, dst: Any, *, gzip: bool = False, timeout: float | None = None) -> int:
        """As :meth:`kruntimes.sandbox.Files.download_tar` into ``dst`` (a
        path-like or a binary file object), in a worker thread."""
        if dst is None:
            raise TypeError("download_tar of the asyncio client writes to dst: name a local file or pass a file object")
        return await asyncio.to_thread(self._sync.download_tar, path, dst, gzip=gzip, timeout=timeout)  # type: ignore[return-value]

    async def download_dir(self, path: str, local_dir: Any, *, timeout: float | None = None) -> Downloaded:
        """As :meth:`kruntimes.sandbox.Files.download_dir`, in a worker thread."""
        return await asyncio.to_thread(self._sync.download_dir, path, local_dir, timeout=timeout)

    async def upload_tar(self, path: str, src: Any, *, timeout: float | None = None) -> Extracted:
        """As :meth:`kruntimes.sandbox.Files.upload_tar`, in a worker thread."""
        return await asyncio.to_thread(self._sync.upload_tar, path, src, timeout=timeout)

    async def upload_dir(self, local_dir: Any, path: str, *, timeout: float | None = None) -> Extracted:
        """As :meth:`kruntimes.sandbox.Files.upload_dir`, in a worker thread."""
        return await asyncio.to_thread(self._sync.upload_dir, local_dir, path, timeout=timeout)

    async def list(self, path: str = ".", *, recursive: bool = False, max_entries: int | None = None) -> EntryList:
        return await asyncio.to_thread(self._sync.list, path, recursive=recursive, max_entries=max_entries)

    async def stat(self, path: str) -> EntryInfo:
        return await asyncio.to_thread(self._sync.stat, path)

    async def exists(self, path: str) -> bool:
        return await asyncio.to_thread(self._sync.exists, path)

    async def mkdir(self, path: str, *, parents: bool = True, exist_ok: bool = True) -> bool:
        return await asyncio.to_thread(self._sync.mkdir, path, parents=parents, exist_ok=exist_ok)

    async def move(self, src: str, dst: str) -> None:
        await asyncio.to_thread(self._sync.move, src, dst)

    async def remove(self, path: str, *, recursive: bool = True) -> None:
        await asyncio.to_thread(self._sync.remove, path, recursive=recursive)


class Client:
    """``kruntimes.aio.Client(namespace=None, kubeconfig=None, context=None)``:
    as :class:`kruntimes.Client`, with awaitable calls. Loading the
    kubeconfig happens in the constructor (it may run an exec plugin)."""

    def __init__(self, namespace: str | None = None, kubeconfig: str | None = None,
                 context: str | None = None) -> None:
        self.sync = sync_client.Client(namespace=namespace, kubeconfig=kubeconfig, context=context)
        self.namespace = self.sync.namespace
        self.functions = Functions(self.sync.functions)
        self.tasks = Tasks(self.sync.tasks)

    async def sandbox(self, runtime: str = "python", **kw: Any) -> Sandbox:
        """As :meth:`kruntimes.Client.sandbox`: Ready when returned."""
        return Sandbox(await asyncio.to_thread(self.sync.sandbox, runtime, **kw))

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sync.close()


__all__ = ["Client", "Commands", "Files", "Function", "Functions", "Sandbox", "Task", "Tasks"]
