"""kruntimes: function and task Runs on warm Kubernetes Pods, from Python.

    import kruntimes

    client = kruntimes.Client()
    with client.functions.create(runtime="python", source=code, handler="main.handle") as fn:
        fn.wait_ready()
        print(fn.invoke({"x": 1}).output)

See docs/sdk-python.md. ``kruntimes.aio`` has the same shape with
``async`` methods.
"""

from .client import Client
from .errors import (
    Busy,
    Cause,
    Conflict,
    OutcomeEvicted,
    ConnectFailed,
    Forbidden,
    FunctionError,
    Invalid,
    InvocationTimeout,
    KruntimesError,
    NotFound,
    OutcomeUnknown,
    PayloadTooLarge,
    RunEnded,
    Unavailable,
    WaitTimeout,
)
from .functions import Function, Functions, InvokeResult, Logs, SecretKeyRef
from .retry import Retry
from .sandbox import (
    CommandHandle,
    CommandInfo,
    CommandResult,
    EntryInfo,
    EntryList,
    Execution,
    ExecutionError,
    Downloaded,
    Extracted,
    Sandbox,
    SandboxFileNotFound,
    SandboxPathError,
    SharedRuntime,
)
from .tasks import Task, TaskResult, Tasks

__version__ = "0.1.0"

__all__ = [
    "Busy",
    "Cause",
    "Client",
    "CommandHandle",
    "CommandInfo",
    "CommandResult",
    "Conflict",
    "OutcomeEvicted",
    "ConnectFailed",
    "EntryInfo",
    "EntryList",
    "Execution",
    "ExecutionError",
    "Downloaded",
    "Extracted",
    "Forbidden",
    "Function",
    "FunctionError",
    "Functions",
    "Invalid",
    "InvocationTimeout",
    "InvokeResult",
    "KruntimesError",
    "Logs",
    "NotFound",
    "OutcomeUnknown",
    "PayloadTooLarge",
    "Retry",
    "RunEnded",
    "Sandbox",
    "SandboxFileNotFound",
    "SandboxPathError",
    "SecretKeyRef",
    "SharedRuntime",
    "Task",
    "TaskResult",
    "Tasks",
    "Unavailable",
    "WaitTimeout",
]
