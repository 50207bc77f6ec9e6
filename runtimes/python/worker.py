# kruntimes warm Python function worker.
#
# Started by the Runtime Server, often ahead of need as a spare: the
# interpreter and this file are loaded before any registration exists. The
# first frame it reads says what to serve (working directory, handler and
# environment); it imports the handler module once, reports readiness, then
# serves invocations one at a time over length-prefixed frames: requests on
# fd 3, responses on fd 4. An invocation and its answer each carry a JSON
# head (its length in 4 bytes, then the head) followed by the input, or by
# the handler's stdout, its stderr and the output, as they are: the head
# says how many bytes of stdout and stderr come first. fd 1 and fd 2 stay
# the worker's own logs; print() inside a handler is captured per
# invocation instead.
#
# fd 5 carries events, frames of the same shape, about the background
# commands a built-in handler starts (the sandbox's start_command): one
# started, a chunk of its output, one ended. Threads write them as the
# commands produce output, so an answer's head counts the events written
# before it ("events"): the Runtime Server handles that many before the
# invocation returns, and a command is known there once it is started.
#
# argv: worker.py MAX_LOG_BYTES
import importlib
import json
import os
import struct
import sys
import threading
import time
import traceback
import types

REQ_FD = 3
RESP_FD = 4
EVENT_FD = 5
MAX_MESSAGE = 4096
MAX_STACK = 8192


class EndOfRequests(Exception):
    pass


# Buffered, so that a frame's header and a small payload arrive in one
# read from the pipe.
requests = os.fdopen(REQ_FD, "rb", buffering=64 * 1024, closefd=False)


def read_exact(n):
    buf = requests.read(n)
    while len(buf) < n:
        chunk = requests.read(n - len(buf))
        if not chunk:
            raise EndOfRequests()
        buf += chunk
    return buf


def read_frame():
    (length,) = struct.unpack(">I", read_exact(4))
    return read_exact(length)


def write_frame(*parts):
    data = memoryview(b"".join((struct.pack(">I", sum(len(p) for p in parts)),) + parts))
    while data:
        n = os.write(RESP_FD, data)
        data = data[n:]


class CommandEvents:
    """Sends what background commands do to the Runtime Server on fd 5.
    Threads send beside the main thread, so a frame is written whole under
    the lock; `written` counts the frames sent, and only grows once a frame
    is written."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()
        self.written = 0

    def _send(self, head, body=b""):
        h = json.dumps(head, separators=(",", ":")).encode("utf-8")
        data = memoryview(b"".join((struct.pack(">II", 4 + len(h) + len(body), len(h)), h, body)))
        with self.lock:
            try:
                while data:
                    n = os.write(self.fd, data)
                    data = data[n:]
            except OSError:
                # The Runtime Server stopped reading: it is closing this
                # worker, and the commands with it.
                return
            self.written += 1

    def started(self, command_id):
        self._send({"type": "start", "id": command_id})

    def output(self, command_id, stream, data):
        """data (bytes) written by the command to stream, "stdout" or "stderr"."""
        self._send({"type": "output", "id": command_id, "stream": stream}, data)

    def ended(self, command_id, exit_code):
        self._send({"type": "end", "id": command_id, "exit_code": exit_code})


events = CommandEvents(EVENT_FD)


def send(obj):
    write_frame(json.dumps(obj, separators=(",", ":")).encode("utf-8"))


def describe(exc):
    return {
        "type": type(exc).__name__,
        "message": str(exc)[:MAX_MESSAGE],
        "stack": traceback.format_exc()[-MAX_STACK:],
    }


class BoundedWriter:
    """A text stream that keeps the first `limit` bytes written to it."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, limit):
        self.limit = limit
        self.parts = []
        self.size = 0
        self.truncated = False

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError("write() argument must be str, not %s" % type(s).__name__)
        room = self.limit - self.size
        if room <= 0:
            self.truncated = self.truncated or bool(s)
            return len(s)
        b = s.encode("utf-8", "replace")
        if len(b) > room:
            b = b[:room]
            self.truncated = True
        self.parts.append(b)
        self.size += len(b)
        return len(s)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass

    def isatty(self):
        return False

    def writable(self):
        return True

    def value(self):
        """What was kept, as UTF-8."""
        data = b"".join(self.parts)
        if self.truncated:
            # Each part was encoded whole; only the cut can split a
            # character, and a split one becomes U+FFFD.
            data = data.decode("utf-8", "replace").encode("utf-8")
        return data


class Context:
    """What a handler learns about its invocation, and how it sets outputs."""

    __slots__ = ("invocation_id", "run_uid", "deadline", "outputs")

    def __init__(self, invocation_id, run_uid, deadline):
        self.invocation_id = invocation_id
        self.run_uid = run_uid
        # Unix time in seconds, or None when the invocation has no deadline.
        self.deadline = deadline
        self.outputs = {}

    def remaining_time(self):
        """Seconds left before the deadline, or None when there is none."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.time())

    def set_output(self, key, value):
        self.outputs[str(key)] = str(value)


def enter_registration(working_dir, env):
    """Makes the registration's environment the spare's: for the handler
    and for every program it starts. The interpreter started isolated (-I),
    ignoring PYTHON* variables, so PYTHONPATH is applied here: its entries
    follow the workspace on sys.path, as they would follow a script's
    directory."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(working_dir)
    if env.get("PYTHONDONTWRITEBYTECODE"):
        sys.dont_write_bytecode = True
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[0:0] = [working_dir] + extra


def load_handler(working_dir, handler, env):
    enter_registration(working_dir, env)
    module_name, _, function_name = handler.rpartition(".")
    if not module_name or not function_name:
        raise ValueError("handler %r must be module.function" % handler)
    module = importlib.import_module(module_name)
    fn = getattr(module, function_name, None)
    if fn is None:
        raise AttributeError("module %r has no attribute %r" % (module_name, function_name))
    if not callable(fn):
        raise TypeError("%s is not callable" % handler)
    return fn


def load_builtin(working_dir, env, builtin):
    """A handler the Runtime Server ships (builtin["source"], for example
    the sandbox), set up by the source's make_handler instead of imported
    from the workspace. It reports background commands through events,
    numbering them on from how many earlier workers of the registration
    started."""
    enter_registration(working_dir, env)
    module = types.ModuleType(builtin["module"])
    exec(compile(builtin["source"], "<%s>" % builtin["module"], "exec"), module.__dict__)
    sys.modules[builtin["module"]] = module
    return module.make_handler(working_dir, builtin.get("reaper"), builtin.get("limits") or {},
                               events=events, commands_started=builtin.get("commands_started", 0))


def split_headed(frame):
    (head_len,) = struct.unpack_from(">I", frame)
    # A view, so the body is not copied out of the frame.
    return json.loads(frame[4:4 + head_len]), memoryview(frame)[4 + head_len:]


def invoke(fn, req, body, max_log):
    """Runs one invocation: returns the head of the answer and its bodies."""
    content_type = req.get("content_type") or "application/json"
    try:
        if content_type == "application/json":
            # The one parse of the input on its way: the apiserver validated
            # it and nothing between scanned it again. Invalid UTF-8 in a
            # string becomes U+FFFD, as Go's JSON does.
            event = json.loads(str(body, "utf-8", "replace")) if body else None
        else:
            event = bytes(body)
    except (ValueError, RecursionError) as e:
        # The apiserver checked the input's syntax and depth: only a caller
        # that mislabels its input, or nests it deeper than this interpreter
        # can parse, gets here. The handler did not run, and the worker
        # lives on.
        return {"error": describe(e)}, b"", b"", b""
    deadline_ns = req.get("deadline_unix_nano") or 0
    ctx = Context(req.get("invocation_id", ""), req.get("run_uid", ""), deadline_ns / 1e9 if deadline_ns else None)

    out, err = BoundedWriter(max_log), BoundedWriter(max_log)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    resp = {}
    output = b""
    try:
        result = fn(event, ctx)
        if isinstance(result, (bytes, bytearray)):
            output = bytes(result)
            resp["content_type"] = "application/octet-stream"
        else:
            try:
                output = json.dumps(result, allow_nan=False, separators=(",", ":")).encode("utf-8")
            except (TypeError, ValueError) as e:
                resp["error"] = {"type": "OutputNotSerializable", "message": ("handler returned a value that is not JSON: %s" % e)[:MAX_MESSAGE], "stack": ""}
            resp["content_type"] = "application/json"
    except BaseException as e:  # noqa: B902 -- SystemExit from a handler is its failure too
        resp["error"] = describe(e)
    finally:
        sys.stdout, sys.stderr = saved
    # What is empty is left out: the Runtime Server reads it as empty.
    if ctx.outputs:
        resp["outputs"] = ctx.outputs
    stdout, stderr = out.value(), err.value()
    if stdout:
        resp["stdout_bytes"] = len(stdout)
    if stderr:
        resp["stderr_bytes"] = len(stderr)
    if out.truncated:
        resp["stdout_truncated"] = True
    if err.truncated:
        resp["stderr_truncated"] = True
    return resp, stdout, stderr, output


def main():
    max_log = int(sys.argv[1])
    # Programs a handler starts must not inherit the protocol pipes: a child
    # writing to fd 4 would corrupt the framing, and one holding it open
    # would hide the worker's death.
    os.set_inheritable(REQ_FD, False)
    os.set_inheritable(RESP_FD, False)
    os.set_inheritable(EVENT_FD, False)
    try:
        spec = json.loads(read_frame())
    except EndOfRequests:
        return 0
    try:
        if spec.get("builtin"):
            fn = load_builtin(spec["working_dir"], spec.get("env") or {}, spec["builtin"])
        else:
            fn = load_handler(spec["working_dir"], spec["handler"], spec.get("env") or {})
    except BaseException as e:  # noqa: B902 -- any import failure is fatal for the registration
        send({"type": "fatal", "error": describe(e)})
        return 1
    send({"type": "ready"})
    while True:
        try:
            frame = read_frame()
        except EndOfRequests:
            return 0
        req, body = split_headed(frame)
        resp, stdout, stderr, output = invoke(fn, req, body, max_log)
        if events.written:
            resp["events"] = events.written
        head = json.dumps(resp, separators=(",", ":")).encode("utf-8")
        write_frame(struct.pack(">I", len(head)), head, stdout, stderr, output)


if __name__ == "__main__":
    sys.exit(main())
