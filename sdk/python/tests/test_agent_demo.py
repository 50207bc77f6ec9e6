"""The agent demo (examples/agent) runs to its answer against the cluster
and leaves nothing behind."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import kruntimes

AGENT = pathlib.Path(__file__).resolve().parents[3] / "examples" / "agent" / "agent.py"


def load_agent():
    spec = importlib.util.spec_from_file_location("agent_demo", AGENT)
    module = importlib.util.module_from_spec(spec)
    # Its dataclasses resolve their annotations through sys.modules.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_agent_demo_answers_and_cleans_up(client: kruntimes.Client, namespace: str, python_runtime: str,
                                          sandbox_runtime: str, capsys) -> None:
    agent = load_agent()
    before = {f.name for f in client.functions.list()}
    transcript = agent.main(["--kubeconfig", client_kubeconfig(), "--namespace", namespace,
                             "--runtime", python_runtime, "--sandbox-runtime", sandbox_runtime])

    tools = [t.decision.tool for t in transcript.turns if isinstance(t.decision, agent.ToolCall)]
    assert tools == ["search", "calculator", "run_code", "read_file"]
    assert all(t.error is None for t in transcript.turns), transcript.render()
    assert [h["title"] for h in transcript.turns[0].result["hits"]] == ["invoke"], "the search tool ran its corpus"
    assert transcript.turns[1].result["value"] == 42
    assert transcript.turns[2].result["result"] == 84, "the sandbox ran code on the calculator's result"
    answer = transcript.turns[-1].decision
    assert isinstance(answer, agent.Answer)
    assert answer.text == "1 hit(s); 6 * 7 = 42 (doubled in the sandbox: 84)"
    printed = capsys.readouterr().out
    assert "agent -> calculator" in printed and printed.rstrip().endswith(answer.text), "a readable transcript"

    # Deleted Runs may linger while their finalizers run; none stays live.
    live = [f.name for f in client.functions.list()
            if f.name not in before and not f.run["metadata"].get("deletionTimestamp")]
    assert live == [], f"the demo left Runs behind: {live}"


def client_kubeconfig() -> str:
    return os.environ["KRUNTIMES_TEST_KUBECONFIG"]
