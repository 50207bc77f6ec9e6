"""A tool-using agent on kruntimes: tools are function Runs, code runs in a
sandbox, and every call is one authorized, audited invocation.

No model is reachable from where this runs, so the loop takes a pluggable
``decide(history) -> ToolCall | Answer``; ``scripted_decider`` plays a
model's part here, and README.md shows where a real LLM client plugs in.

    python3 examples/agent/agent.py --namespace agents --runtime python --sandbox-runtime sandbox
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, Union

import kruntimes

# The tools' code: each is a function Run of its own, so each has its own
# RBAC (create runs/invoke on that Run), audit trail and Pod slot.
CALCULATOR = '''import ast, operator

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
       ast.Div: operator.truediv, ast.Pow: operator.pow, ast.USub: operator.neg}

def value(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        return OPS[type(node.op)](value(node.left), value(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPS:
        return OPS[type(node.op)](value(node.operand))
    raise ValueError("only numbers and + - * / ** are allowed")

def handle(event, context):
    return {"expression": event["expression"], "value": value(ast.parse(event["expression"], mode="eval").body)}
'''

SEARCH = '''CORPUS = {
    "kruntimes": "kruntimes runs trusted functions, CI steps and agent tools on warm Kubernetes Pods.",
    "warm pods": "A warm Pod has its interpreter loaded, so a function registers in milliseconds.",
    "invoke": "Every invocation is authorized by Kubernetes RBAC as create on runs/invoke.",
    "sandbox": "A sandbox keeps Python state between calls on a Pod of its own.",
}

def handle(event, context):
    words = set(event["query"].lower().split())
    hits = [{"title": t, "text": x} for t, x in CORPUS.items() if words & set((t + " " + x).lower().split())]
    return {"query": event["query"], "hits": hits}
'''

TOOLS = {
    "calculator": {"source": CALCULATOR, "description": "Evaluates an arithmetic expression.",
                   "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}},
    "search": {"source": SEARCH, "description": "Searches a small corpus about kruntimes.",
               "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}},
    # The sandbox's operations as tools of their own.
    "run_code": {"description": "Runs Python in a stateful sandbox; returns stdout and the last expression's value.",
                 "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}},
    "read_file": {"description": "Reads a file of the sandbox's workspace.",
                  "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
}


@dataclass
class ToolCall:
    tool: str
    arguments: dict[str, Any]


@dataclass
class Answer:
    text: str


Decision = Union[ToolCall, Answer]


@dataclass
class Turn:
    """One step of the history: what was decided and what the tool returned."""

    decision: Decision
    result: Any = None
    error: str | None = None


@dataclass
class Transcript:
    question: str
    turns: list[Turn] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"user: {self.question}"]
        for t in self.turns:
            if isinstance(t.decision, Answer):
                lines.append(f"agent: {t.decision.text}")
                continue
            lines.append(f"agent -> {t.decision.tool}({json.dumps(t.decision.arguments)})")
            lines.append(f"  <- {t.error or json.dumps(t.result)}")
        return "\n".join(lines)


def scripted_decider(question: str) -> Callable[[list[Turn]], Decision]:
    """Plays the model: searches, computes with the calculator, hands the
    result to code in the sandbox, reads the file the code wrote, answers."""

    def decide(history: list[Turn]) -> Decision:
        step = len(history)
        if step == 0:
            return ToolCall("search", {"query": "invoke rbac"})
        if step == 1:
            return ToolCall("calculator", {"expression": "6 * 7"})
        if step == 2:
            value = history[1].result["value"]
            code = (f"hits = {len(history[0].result['hits'])}\nanswer = {value}\n"
                    "with open('report.txt', 'w') as f:\n    f.write(f'{hits} hit(s); 6 * 7 = {answer}\\n')\n"
                    "answer * 2")
            return ToolCall("run_code", {"code": code})
        if step == 3:
            return ToolCall("read_file", {"path": "report.txt"})
        return Answer(f"{history[3].result.strip()} (doubled in the sandbox: {history[2].result['result']})")

    return decide


class Agent:
    """Registers the tools as function Runs, opens a sandbox, runs the loop,
    and deletes all of it at the end (``with``)."""

    def __init__(self, client: kruntimes.Client, runtime: str, sandbox_runtime: str) -> None:
        self.client, self.runtime, self.sandbox_runtime = client, runtime, sandbox_runtime
        self.functions: dict[str, kruntimes.Function] = {}
        self.sandbox: kruntimes.Sandbox | None = None

    def __enter__(self) -> "Agent":
        try:
            for name in ("calculator", "search"):
                self.functions[name] = self.client.functions.create(
                    generate_name=f"tool-{name}-", runtime=self.runtime, source=TOOLS[name]["source"],
                    handler="main.handle", labels={"kruntimes.io/tool": "true"}, idle_timeout=600)
            for fn in self.functions.values():
                fn.wait_ready(timeout=120)
            self.sandbox = self.client.sandbox(self.sandbox_runtime, idle_timeout=600)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
        for fn in self.functions.values():
            fn.delete()

    def call(self, call: ToolCall) -> Any:
        if call.tool in self.functions:
            return self.functions[call.tool].invoke(call.arguments).output
        assert self.sandbox is not None
        if call.tool == "run_code":
            e = self.sandbox.run_code(call.arguments["code"])
            if e.error:
                raise RuntimeError(f"{e.error.name}: {e.error.value}")
            return {"stdout": e.stdout, "result": e.result}
        if call.tool == "read_file":
            return self.sandbox.files.read(call.arguments["path"]).decode()
        raise KeyError(f"no tool {call.tool!r}")

    def run(self, question: str, decide: Callable[[list[Turn]], Decision], max_steps: int = 10) -> Transcript:
        transcript = Transcript(question)
        for _ in range(max_steps):
            decision = decide(transcript.turns)
            turn = Turn(decision)
            transcript.turns.append(turn)
            if isinstance(decision, Answer):
                return transcript
            try:
                turn.result = self.call(decision)
            except kruntimes.FunctionError as e:
                # The tool ran and raised: the model sees the error and may
                # try another way, as function-calling APIs expect.
                turn.error = f"{e.type}: {e.error_message}"
            except RuntimeError as e:
                turn.error = str(e)
        raise RuntimeError(f"no answer after {max_steps} steps")


def main(argv: Sequence[str] | None = None) -> Transcript:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig")
    parser.add_argument("--context")
    parser.add_argument("--namespace")
    parser.add_argument("--runtime", default="python", help="Python Runtime the tools run on")
    parser.add_argument("--sandbox-runtime", default="sandbox", help="Python Runtime of capacity.runs 1 for the sandbox")
    args = parser.parse_args(argv)
    question = "How are invocations authorized, and what is 6 * 7?"
    with kruntimes.Client(namespace=args.namespace, kubeconfig=args.kubeconfig, context=args.context) as client:
        with Agent(client, args.runtime, args.sandbox_runtime) as agent:
            transcript = agent.run(question, scripted_decider(question))
    print(transcript.render())
    return transcript


if __name__ == "__main__":
    main(sys.argv[1:])
