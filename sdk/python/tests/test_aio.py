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
