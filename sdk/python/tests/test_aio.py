"""kruntimes.aio against a real cluster: the same calls, awaited."""

from __future__ import annotations

import asyncio
import pathlib

import pytest

import kruntimes
import kruntimes.aio
from conftest import HANDLERS, Counter, env


def test_async_create_invoke_busy_tasks_and_cleanup(namespace: str, python_runtime: str, bash_runtime: str,
                                                    tmp_path: pathlib.Path) -> None:
    counter = Counter(tmp_path / "aio")

    async def main() -> None:
        async with kruntimes.aio.Client(namespace=namespace, kubeconfig=env("KRUNTIMES_TEST_KUBECONFIG")) as client:
            async with await client.functions.create(generate_name="aio-", runtime=python_runtime, source=HANDLERS,
                                                     handler="main.record") as fn:
                await fn.wait_ready(timeout=90)
                first = asyncio.create_task(fn.invoke({"file": str(counter.path), "sleep": 2}, invocation_id="a1"))
                await asyncio.to_thread(counter.wait_for, 1)
                with pytest.raises(kruntimes.Busy):
                    await fn.invoke({"file": str(counter.path)}, invocation_id="a2")
                assert (await first).output == "recorded"
                assert counter.ids() == ["a1"]
                listed = await client.functions.list()
                assert fn.name in [f.name for f in listed]
            result = await client.tasks.run(bash_runtime, script="echo aio\n", wait_timeout=90)
            assert result.succeeded
            task = await client.tasks.run(bash_runtime, script="echo later\n", wait=False)
            assert (await task.wait(60)).succeeded
            assert [line async for line in task.logs()] == ["later\n"]
            await task.delete()

    asyncio.run(main())


def test_async_sandbox_keeps_state_and_is_deleted(client: kruntimes.Client, namespace: str,
                                                  sandbox_runtime: str) -> None:
    async def main() -> str:
        async with kruntimes.aio.Client(namespace=namespace, kubeconfig=env("KRUNTIMES_TEST_KUBECONFIG")) as aclient:
            async with await aclient.sandbox(sandbox_runtime, ready_timeout=180) as sb:
                await sb.run_code("x = 40")
                assert (await sb.run_code("x + 2")).result == 42
                await sb.files.write("a.txt", "hi")
                assert await sb.files.read("a.txt") == b"hi"
                assert (await sb.commands.run("cat a.txt")).stdout == "hi"
                return sb.name

    name = asyncio.run(main())
    try:
        run = client.functions.get(name).run
    except kruntimes.NotFound:
        return
    assert run["metadata"].get("deletionTimestamp"), "async with deletes the sandbox"
