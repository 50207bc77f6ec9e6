"""Function Runs through the SDK against a real cluster, every error provoked
for real; the ``record`` handler counts its own executions."""

from __future__ import annotations

import os
import pathlib
import signal
import threading
import time

import pytest

import kruntimes
from conftest import HANDLERS, Counter, env, poll


def test_create_wait_invoke_get_list_and_with_deletes(client: kruntimes.Client, python_runtime: str,
                                                       tmp_path: pathlib.Path) -> None:
    source = tmp_path / "greeter.py"
    source.write_text(HANDLERS)
    with client.functions.create(generate_name="echo-", runtime=python_runtime, source=source,
                                 handler="greeter.echo", env={"GREETING": "hello"}, idle_timeout=600,
                                 timeout="30m", labels={"suite": "sdk", "case": "echo"}, max_attempts=2) as fn:
        assert fn.run["spec"]["source"]["inlinePath"] == "greeter.py", "a Path keeps its file name"
        assert fn.wait_ready(timeout=90) is fn
        assert fn.phase == "Ready"
        result = fn.invoke({"x": 1}, invocation_id="mine-1", timeout=20)
        assert result.output == {"echo": {"x": 1}, "greeting": "hello", "invocation": "mine-1"}
        assert result.invocation_id == "mine-1"
        assert "echo says hi" in result.logs.stdout
        assert result.duration >= 0
        generated = fn.invoke([1, 2])
        assert len(generated.invocation_id) > 0 and generated.output["echo"] == [1, 2]

        assert client.runtime(python_runtime)["spec"]["capacity"]["runs"] == 8
        got = client.functions.get(fn.name)
        assert got.uid == fn.uid and got.phase == "Ready"
        assert [f.name for f in client.functions.list({"case": "echo"})] == [fn.name]
        assert [f.name for f in client.functions.list("suite=sdk,case=echo")] == [fn.name]
        assert client.functions.list({"case": "none"}) == []
        name = fn.name

    def gone() -> bool:
        try:
            client.functions.get(name)
        except kruntimes.NotFound:
            return True
        return False

    poll(gone, 60, f"the with block deletes {name}")


def test_with_deletes_the_run_even_when_the_body_raises(client: kruntimes.Client, python_runtime: str) -> None:
    with pytest.raises(RuntimeError):
        with client.functions.create(generate_name="raise-", runtime=python_runtime,
                                     source="def handle(e, c):\n    return e\n", handler="main.handle") as fn:
            assert fn.run["spec"]["source"]["inlinePath"] == "main.py", "a str source is main.py"
            raise RuntimeError("body failed")

    def gone() -> bool:
        try:
            client.functions.get(fn.name)
        except kruntimes.NotFound:
            return True
        return False

    poll(gone, 60, f"{fn.name} is deleted")


def test_a_handler_that_raises_is_function_error(client: kruntimes.Client, python_runtime: str) -> None:
    with client.functions.create(generate_name="boom-", runtime=python_runtime, source=HANDLERS,
                                 handler="main.boom") as fn:
        fn.wait_ready(timeout=90)
        with pytest.raises(kruntimes.FunctionError) as e:
            fn.invoke({}, invocation_id="boom-1")
        assert e.value.type == "ValueError" and "no good" in e.value.error_message
        assert e.value.invocation_id == "boom-1" and e.value.run == fn.name and not e.value.not_run
        assert e.value.result is not None and e.value.result.invocation_id == "boom-1"


def test_wait_ready_fails_fast_with_the_runs_message(client: kruntimes.Client, python_runtime: str) -> None:
    with client.functions.create(generate_name="broken-", runtime=python_runtime,
                                 source="def handle(event, context)\n    return 1\n", handler="main.handle") as fn:
        started = time.monotonic()
        with pytest.raises(kruntimes.RunEnded) as e:
            fn.wait_ready(timeout=90)
        assert e.value.phase == "Failed"
        assert "SyntaxError" in str(e.value), str(e.value)
        assert time.monotonic() - started < 60, "it did not wait out the timeout"


def test_an_invalid_spec_is_invalid_with_field_causes(client: kruntimes.Client, python_runtime: str) -> None:
    with pytest.raises(kruntimes.Invalid) as e:
        client.functions.create("bad", runtime=python_runtime, source="x = 1\n", handler="main.handle",
                                path="../escape.py", env={"1NOT_AN_IDENTIFIER": "v"}, idle_timeout=0)
    fields = {c.field for c in e.value.causes}
    assert "spec.source.inlinePath" in fields, e.value.causes
    assert any(f.startswith("spec.env[0].name") for f in fields), e.value.causes
    assert e.value.code == 422 and e.value.not_run
    with pytest.raises(kruntimes.NotFound):
        client.functions.get("bad")


def test_two_concurrent_invocations_the_second_is_busy_and_did_not_run(handlers: kruntimes.Function,
                                                                       counter: Counter, tmp_path: pathlib.Path) -> None:
    first: dict = {}
    t = threading.Thread(target=lambda: first.setdefault(
        "result", handlers.invoke({"file": str(counter.path), "sleep": 3}, invocation_id="first")))
    t.start()
    counter.wait_for(1)
    second = Counter(tmp_path / "second")
    with pytest.raises(kruntimes.Busy) as e:
        handlers.invoke({"file": str(second.path)}, invocation_id="second")
    t.join(30)
    assert first["result"].output == "recorded"
    assert e.value.code == 429 and e.value.retry_after > 0 and e.value.not_run
    assert e.value.invocation_id == "second" and e.value.run == handlers.name
    assert counter.ids() == ["first"] and second.ids() == [], "each ran as often as it was answered"


def test_retry_resends_a_busy_invocation_until_it_runs_once(handlers: kruntimes.Function, counter: Counter,
                                                            tmp_path: pathlib.Path) -> None:
    t = threading.Thread(target=lambda: handlers.invoke({"file": str(counter.path), "sleep": 2}, invocation_id="hold"))
    t.start()
    counter.wait_for(1)
    second = Counter(tmp_path / "retried")
    result = handlers.invoke({"file": str(second.path)}, invocation_id="retried", retry=kruntimes.Retry(deadline=30))
    t.join(30)
    assert result.output == "recorded"
    assert second.ids() == ["retried"], "re-sent after 429s, ran exactly once"


def test_a_function_not_yet_ready_is_unavailable(client: kruntimes.Client, counter: Counter) -> None:
    with client.functions.create(generate_name="nowhere-", runtime="no-such-runtime", source=HANDLERS,
                                 handler="main.record") as fn:
        with pytest.raises(kruntimes.Unavailable) as e:
            fn.invoke({"file": str(counter.path)})
        assert e.value.code == 503 and e.value.retry_after > 0 and e.value.not_run and e.value.run == fn.name
        started = time.monotonic()
        with pytest.raises(kruntimes.Unavailable):
            fn.invoke({"file": str(counter.path)}, retry=kruntimes.Retry(deadline=2))
        assert time.monotonic() - started < 10
        with pytest.raises(kruntimes.WaitTimeout):
            fn.wait_ready(timeout=2)
        assert counter.ids() == []


def test_a_handler_past_its_timeout_is_invocation_timeout_and_ran_once(handlers: kruntimes.Function,
                                                                       counter: Counter) -> None:
    with pytest.raises(kruntimes.InvocationTimeout) as e:
        handlers.invoke({"file": str(counter.path), "sleep": 10}, invocation_id="slow", timeout=1,
                        retry=kruntimes.Retry())
    assert e.value.code == 504 and not e.value.not_run and e.value.invocation_id == "slow"
    assert counter.ids() == ["slow"], "not re-sent"
    after = handlers.invoke({"file": str(counter.path)}, invocation_id="next", retry=kruntimes.Retry(deadline=30))
    assert after.output == "recorded"
    assert counter.ids() == ["slow", "next"]


def test_an_input_over_1_mib_is_payload_too_large_before_sending(handlers: kruntimes.Function) -> None:
    with pytest.raises(kruntimes.PayloadTooLarge) as e:
        handlers.invoke({"file": "/nonexistent", "pad": "x" * (2 << 20)})
    assert e.value.not_run and e.value.run == handlers.name


def test_a_reader_without_create_runs_invoke_is_forbidden(handlers: kruntimes.Function, counter: Counter) -> None:
    reader = kruntimes.Client(kubeconfig=env("KRUNTIMES_TEST_READER_KUBECONFIG"))
    assert reader.namespace == handlers.namespace, "the namespace of the kubeconfig's context"
    fn = reader.functions.get(handlers.name)
    assert fn.uid == handlers.uid, "reading is allowed"
    with pytest.raises(kruntimes.Forbidden) as e:
        fn.invoke({"file": str(counter.path)}, retry=kruntimes.Retry())
    assert e.value.code == 403 and e.value.not_run
    with pytest.raises(kruntimes.Forbidden):
        reader.functions.create(runtime="x", source="", handler="main.h")
    assert counter.ids() == []
    reader.close()


def _runtimed_of(pod_uid: str) -> int:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if not os.readlink(f"/proc/{entry}/exe").endswith("/runtimed"):
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"POD_UID={pod_uid}".encode() in f.read().split(b"\0"):
                    return int(entry)
        except OSError:
            continue
    return 0


def test_the_owning_pod_killed_mid_invoke_is_outcome_unknown_and_not_resent(client: kruntimes.Client,
                                                                             counter: Counter) -> None:
    runtime = env("KRUNTIMES_TEST_KILL_RUNTIME")
    with client.functions.create(generate_name="doomed-", runtime=runtime, source=HANDLERS,
                                 handler="main.record") as fn:
        fn.wait_ready(timeout=90)
        pid = _runtimed_of(fn.run["status"]["assignedPodUID"])
        assert pid, "the Pod's runtimed runs on this machine"
        answered: dict = {}

        def call() -> None:
            try:
                fn.invoke({"file": str(counter.path), "sleep": 5}, invocation_id="doomed", retry=kruntimes.Retry())
            except kruntimes.KruntimesError as e:
                answered["error"] = e

        t = threading.Thread(target=call)
        t.start()
        counter.wait_for(1)
        os.kill(pid, signal.SIGKILL)
        t.join(60)
        err = answered.get("error")
        assert isinstance(err, kruntimes.OutcomeUnknown), repr(err)
        assert err.code == 502 and not err.not_run and err.invocation_id == "doomed"
        assert counter.ids() == ["doomed"], "ran once, never re-sent"
