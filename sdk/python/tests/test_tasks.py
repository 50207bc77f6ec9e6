"""Task Runs through the SDK against a real cluster."""

from __future__ import annotations

import pathlib

import kruntimes
from conftest import poll


def test_run_waits_and_returns_phase_exit_code_outputs_and_logs(client: kruntimes.Client, bash_runtime: str) -> None:
    result = client.tasks.run(
        bash_runtime,
        script='echo "out $1 $GREETING"\necho err >&2\necho "answer=42" >> "$KRUNTIMES_OUTPUTS"\n',
        args=["arg1"], env={"GREETING": "hi"}, timeout=120, name="with-outputs", wait_timeout=90)
    assert isinstance(result, kruntimes.TaskResult)
    assert (result.name, result.phase, result.exit_code, result.attempt) == ("with-outputs", "Succeeded", 0, 1)
    assert result.outputs == {"answer": "42"}
    assert result.succeeded
    failed = client.tasks.run(bash_runtime, script="echo failing\nexit 3\n", wait_timeout=90)
    assert (failed.phase, failed.exit_code, failed.outputs) == ("Failed", 3, {})
    assert "exited with code 3" in failed.message, failed.message
    task = client.tasks.get("with-outputs")
    lines = list(task.logs())
    assert "out arg1 hi\n" in lines and "err\n" in lines, lines
    assert list(task.logs(stream="Stderr")) == ["err\n"]
    task.delete()


def test_run_without_wait_then_wait_and_follow_logs(client: kruntimes.Client, bash_runtime: str) -> None:
    task = client.tasks.run(bash_runtime, script="sleep 1\necho done\n", wait=False)
    assert isinstance(task, kruntimes.Task) and task.name.startswith("task-")
    assert list(task.logs(follow=True)) == ["done\n"], "follow ends after the last byte"
    result = task.wait(timeout=60)
    assert result.succeeded and result.exit_code == 0
    task.delete()


def test_entrypoint_runs_a_script_of_the_pods_file_system(client: kruntimes.Client, bash_runtime: str,
                                                           tmp_path: pathlib.Path) -> None:
    # The local cluster's Pods are processes of this machine: a file here is
    # a file of the image.
    script = tmp_path / "seven.sh"
    script.write_text('exit "$1"\n')
    result = client.tasks.run(bash_runtime, entrypoint=str(script), args=["7"], wait_timeout=90)
    assert result.phase == "Failed" and result.exit_code == 7


def test_cancel_ends_a_running_task_as_cancelled(client: kruntimes.Client, bash_runtime: str) -> None:
    task = client.tasks.run(bash_runtime, script="echo started\nsleep 120\n", wait=False)

    def running() -> bool:
        return client.tasks.get(task.name).phase == "Running"

    poll(running, 60, f"{task.name} runs")
    task.cancel()
    assert task.run["spec"]["cancelRequested"] is True
    result = task.wait(timeout=60)
    assert result.phase == "Cancelled", result
    task.delete()


def test_wait_times_out(client: kruntimes.Client, bash_runtime: str) -> None:
    task = client.tasks.run(bash_runtime, script="sleep 120\n", wait=False)
    try:
        try:
            task.wait(timeout=2)
        except kruntimes.WaitTimeout as e:
            assert e.run == task.name
        else:
            raise AssertionError("wait returned before the task ended")
    finally:
        task.cancel()
        task.delete()


def test_follow_yields_lines_while_the_task_runs(client: kruntimes.Client, bash_runtime: str,
                                                tmp_path: pathlib.Path) -> None:
    # The task prints a line, then waits for a file only the test creates
    # once it has read that line: the line must arrive live.
    go_on = tmp_path / "go-on"
    task = client.tasks.run(bash_runtime, wait=False, timeout="2m",
                            script=f"echo one\nwhile [ ! -e {go_on} ]; do sleep 0.05; done\necho two >&2\n")
    lines = task.logs(follow=True)
    assert next(lines) == "one\n"
    assert task._refresh().get("phase") not in ("Succeeded", "Failed", "Timeout", "Cancelled"), "read while running"
    go_on.touch()
    assert list(lines) == ["two\n"], "then the rest, and the follow ends with the attempt"
    assert task.wait(timeout=60).succeeded
    assert list(task.logs()) == ["one\n", "two\n"], "the kept log has both"
    task.delete()
