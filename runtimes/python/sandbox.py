# kruntimes built-in sandbox handler (handler "kruntimes.sandbox").
#
# The worker (worker.py) executes this file instead of importing a user's
# module when a function Run names the handler "kruntimes.sandbox", and
# calls make_handler(workspace, reaper, limits) once. The handler serves one
# JSON object per invocation, {"op": ..., ...}; see docs/sandbox.md for the
# protocol. The registration's working directory is the sandbox's workspace:
# file operations resolve inside it and refuse any path that leaves it.
#
# Every operation runs on the worker's main thread, one at a time (the
# Runtime Server lets one invocation of a registration be in flight), so the
# state here needs no locks.
import ast
import base64
import builtins
import json
import linecache
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
import traceback


class SandboxPathError(Exception):
    """A path names something outside the sandbox's workspace."""


class SandboxRequestError(Exception):
    """The request is not a sandbox operation this handler understands."""


class SandboxFileTooLarge(Exception):
    """A file is larger than a sandbox moves in one operation."""


class SandboxTimeout(Exception):
    """run_code ran past its timeout and was interrupted."""


# How many cells' source lines tracebacks can show.
MAX_CELLS_KEPT = 1000


def make_handler(workspace, reaper, limits):
    return Sandbox(workspace, reaper, limits).handle


def _bounded_text(data, limit):
    """data (bytes) as text, cut to limit bytes; and whether it was cut."""
    cut = len(data) > limit
    return data[:limit].decode("utf-8", "replace"), cut


class _Writer:
    """A text stream keeping the first `limit` bytes written to it."""

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
        b = s.encode("utf-8", "replace")
        if len(b) > room:
            b = b[:max(room, 0)]
            self.truncated = True
        if b:
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
        return b"".join(self.parts).decode("utf-8", "replace")


class Sandbox:
    def __init__(self, workspace, reaper, limits):
        # The workspace as the registration names it, and with its links
        # resolved: a path must stay inside both.
        self.root = os.path.normpath(workspace)
        self.workspace = os.path.realpath(workspace)
        # [executable, argv0] of the Runtime Server's process reaper, or
        # None when programs cannot run under it (then a process group).
        self.reaper = reaper
        self.max_output = int(limits["output_bytes"])
        self.max_file = int(limits["file_bytes"])
        self.max_result = int(limits["result_bytes"])
        self.max_entries = int(limits["list_entries"])
        self.namespace = {"__name__": "__main__", "__builtins__": builtins}
        self.cells = 0

    # --- dispatch ---------------------------------------------------------

    def handle(self, event, context):
        if not isinstance(event, dict):
            raise SandboxRequestError("a sandbox request is a JSON object with an \"op\"; got %s" % type(event).__name__)
        op = event.get("op")
        method = self.OPS.get(op) if isinstance(op, str) else None
        if method is None:
            raise SandboxRequestError("unknown op %r: use one of %s" % (op, ", ".join(sorted(self.OPS))))
        return method(self, event, context)

    @staticmethod
    def _field(event, name, kind, required=True, default=None):
        if name not in event or event[name] is None:
            if required:
                raise SandboxRequestError("op %r needs %r" % (event.get("op"), name))
            return default
        value = event[name]
        if not isinstance(value, kind):
            raise SandboxRequestError("%r must be %s, not %s" % (name, getattr(kind, "__name__", kind), type(value).__name__))
        return value

    @staticmethod
    def _timeout(event, context):
        """The seconds an operation may take: the request's own timeout,
        and in any case a little less than the invocation's deadline, so
        that the sandbox stops the work itself before the Runtime Server
        would kill the worker and its state with it."""
        timeout = event.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            raise SandboxRequestError("'timeout' must be a positive number of seconds or null")
        remaining = context.remaining_time() if context is not None else None
        if remaining is not None:
            margin = min(1.0, remaining / 10)
            budget = max(remaining - margin, 0.01)
            timeout = budget if timeout is None else min(timeout, budget)
        return timeout

    # --- run_code -----------------------------------------------------------

    def run_code(self, event, context):
        code = self._field(event, "code", str)
        timeout = self._timeout(event, context)
        self.cells += 1
        filename = "<cell-%d>" % self.cells
        # Tracebacks show the cell's lines; the oldest cells' lines are
        # dropped so that a long session does not hold all its code.
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        linecache.cache.pop("<cell-%d>" % (self.cells - MAX_CELLS_KEPT), None)
        out, err = _Writer(self.max_output), _Writer(self.max_output)
        saved = sys.stdout, sys.stderr
        result, error = None, None
        previous_alarm = None
        try:
            sys.stdout, sys.stderr = out, err
            tree = ast.parse(code, filename, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            body = compile(tree, filename, "exec")
            tail = compile(last, filename, "eval") if last is not None else None
            if timeout is not None:
                previous_alarm = signal.signal(signal.SIGALRM, _raise_timeout(timeout))
                signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                exec(body, self.namespace)
                if tail is not None:
                    value = eval(tail, self.namespace)
                    result = self._result(value)
            finally:
                if previous_alarm is not None:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    signal.signal(signal.SIGALRM, previous_alarm)
        except BaseException as e:  # noqa: B902 -- the code's SystemExit is its error too
            error = {
                "name": type(e).__name__,
                "value": str(e)[:4096],
                "traceback": "".join(_user_traceback(e, filename))[-8192:],
            }
        finally:
            sys.stdout, sys.stderr = saved
        answer = {"stdout": out.value(), "stderr": err.value(), "result": result, "error": error}
        if out.truncated:
            answer["stdout_truncated"] = True
        if err.truncated:
            answer["stderr_truncated"] = True
        return answer

    def _result(self, value):
        """value as JSON when it is JSON-able and small, else its repr."""
        if value is None:
            return None
        try:
            text = json.dumps(value, allow_nan=False)
            if len(text) <= self.max_result:
                return value
        except (TypeError, ValueError, RecursionError):
            pass
        try:
            text = repr(value)
        except Exception as e:  # noqa: BLE001 -- a broken __repr__ must not fail the call
            text = "<%s object; repr failed: %s>" % (type(value).__name__, e)
        if len(text) > self.max_result:
            text = text[:self.max_result] + "...[truncated]"
        return text

    # --- run_command --------------------------------------------------------

    def run_command(self, event, context):
        cmd = event.get("cmd")
        if isinstance(cmd, str):
            argv = ["/bin/sh", "-c", cmd]
        elif isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd):
            argv = list(cmd)
        else:
            raise SandboxRequestError("'cmd' must be a string (run by /bin/sh -c) or a non-empty list of strings")
        timeout = self._timeout(event, context)
        extra_env = self._field(event, "env", dict, required=False, default={})
        env = dict(os.environ)
        for k, v in extra_env.items():
            if not isinstance(v, str) or not k or "=" in k or "\0" in k or "\0" in v:
                raise SandboxRequestError("env %r must map a name to a string value" % (k,))
            env[k] = v
        cwd = self._field(event, "cwd", str, required=False)
        cwd = self.resolve(cwd) if cwd is not None else self.root
        if not os.path.isdir(cwd):
            raise SandboxPathError("cwd %r is not a directory in the workspace" % event.get("cwd"))

        program = argv[0]
        if "/" not in program:
            found = shutil.which(program, path=env.get("PATH", os.defpath))
            if found is None:
                return {"stdout": "", "stderr": "%s: command not found\n" % program, "exit_code": 127, "timed_out": False}
            program = found
        elif not os.path.isabs(program):
            program = os.path.join(cwd, program)

        if self.reaper:
            # The reaper is a child subreaper: every descendant of the
            # command stays in its subtree, even one that left the process
            # group, and SIGTERM to the reaper kills the whole subtree.
            exe, arg0 = self.reaper
            args, executable = [arg0, "0", program] + argv, exe
        else:
            args, executable = argv, program
        try:
            proc = subprocess.Popen(
                args, executable=executable, cwd=cwd, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, close_fds=True,
            )
        except OSError as e:
            return {"stdout": "", "stderr": "%s: %s\n" % (argv[0], e.strerror or e), "exit_code": 126 if isinstance(e, PermissionError) else 127, "timed_out": False}

        deadline = time.monotonic() + timeout if timeout is not None else None
        stdout, stderr, timed_out = self._collect(proc, deadline)
        code = proc.returncode
        if code is not None and code < 0:
            code = 128 - code  # died of a signal, as a shell reports it
        out, out_cut = _bounded_text(stdout, self.max_output)
        err, err_cut = _bounded_text(stderr, self.max_output)
        answer = {"stdout": out, "stderr": err, "exit_code": code, "timed_out": timed_out}
        if out_cut:
            answer["stdout_truncated"] = True
        if err_cut:
            answer["stderr_truncated"] = True
        return answer

    def _stop(self, proc):
        try:
            if self.reaper:
                os.kill(proc.pid, signal.SIGTERM)
            else:
                os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _collect(self, proc, deadline):
        """Reads the command's output, keeping max_output+1 bytes of each
        stream and draining the rest, until both streams end; stops the
        command at the deadline."""
        keep = self.max_output + 1
        out_buf, err_buf = bytearray(), bytearray()
        buffers = {proc.stdout.fileno(): out_buf, proc.stderr.fileno(): err_buf}
        timed_out = False
        grace_end = None
        with selectors.DefaultSelector() as sel:
            for f in (proc.stdout, proc.stderr):
                sel.register(f, selectors.EVENT_READ)
            while sel.get_map():
                now = time.monotonic()
                if grace_end is not None:
                    wait = grace_end - now
                    if wait <= 0:
                        # Something outside the command's reach holds the
                        # pipes; what it writes from now on is lost.
                        break
                elif deadline is not None:
                    wait = deadline - now
                    if wait <= 0:
                        timed_out = True
                        self._stop(proc)
                        grace_end = now + 5
                        continue
                else:
                    wait = None
                for key, _ in sel.select(wait):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    buf = buffers[key.fd]
                    if len(buf) < keep:
                        buf += chunk[:keep - len(buf)]
        proc.stdout.close()
        proc.stderr.close()
        if grace_end is None:
            # Both streams ended: the command exited, or closed them and
            # carries on.
            try:
                proc.wait(timeout=None if deadline is None else max(deadline - time.monotonic(), 0))
            except subprocess.TimeoutExpired:
                timed_out = True
                self._stop(proc)
                grace_end = time.monotonic() + 5
        if proc.returncode is None:
            try:
                proc.wait(timeout=max(grace_end - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return bytes(out_buf), bytes(err_buf), timed_out

    # --- files ----------------------------------------------------------------

    def resolve(self, path, follow=True):
        """The absolute path `path` names inside the workspace, with its
        symbolic links resolved (but for the last component when follow is
        false). Refuses a path that leaves the workspace: by '..', by being
        absolute elsewhere, or through a symbolic link that points out."""
        if not isinstance(path, str) or path == "":
            raise SandboxRequestError("'path' must be a non-empty string")
        if "\0" in path:
            raise SandboxPathError("path %r contains a NUL byte" % path)
        joined = os.path.normpath(os.path.join(self.root, path))
        if not _within(joined, self.root):
            raise SandboxPathError("path %r is outside the sandbox's workspace" % path)
        # Every symbolic link on the way, the last component included, must
        # resolve inside the workspace.
        real = os.path.realpath(joined)
        if not _within(real, self.workspace):
            raise SandboxPathError("path %r leads outside the sandbox's workspace through a symbolic link" % path)
        if follow or joined == self.root:
            return real
        # The link itself, in its parent's real directory (inside, since
        # the path resolved inside and the parent is on its way).
        parent = os.path.realpath(os.path.dirname(joined))
        if not _within(parent, self.workspace):
            raise SandboxPathError("path %r leads outside the sandbox's workspace through a symbolic link" % path)
        return os.path.join(parent, os.path.basename(joined))

    def write_file(self, event, context):
        path = self.resolve(self._field(event, "path", str))
        data = self._decode(self._field(event, "data_b64", str))
        if len(data) > self.max_file:
            raise SandboxFileTooLarge("the file has %d bytes; a sandbox writes at most %d in one operation" % (len(data), self.max_file))
        if path == self.workspace:
            raise SandboxPathError("the workspace itself is a directory, not a file")
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        # resolve() checked the parents; O_NOFOLLOW refuses a last component
        # that became a link since.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return {"size": len(data)}

    def read_file(self, event, context):
        path = self.resolve(self._field(event, "path", str))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise SandboxRequestError("%r is not a regular file" % event["path"])
            if st.st_size > self.max_file:
                raise SandboxFileTooLarge("%r has %d bytes; a sandbox reads at most %d in one operation" % (event["path"], st.st_size, self.max_file))
            data = f.read(self.max_file + 1)
        if len(data) > self.max_file:
            raise SandboxFileTooLarge("%r grew past %d bytes while being read" % (event["path"], self.max_file))
        return {"data_b64": base64.b64encode(data).decode("ascii")}

    def list_files(self, event, context):
        path = self.resolve(self._field(event, "path", str, required=False, default="."))
        entries, names_bytes, truncated = [], 0, False
        with os.scandir(path) as it:
            for entry in it:
                if len(entries) >= self.max_entries or names_bytes > 64 * 1024:
                    truncated = True
                    break
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    kind = "symlink"
                elif stat.S_ISDIR(st.st_mode):
                    kind = "dir"
                elif stat.S_ISREG(st.st_mode):
                    kind = "file"
                else:
                    kind = "other"
                entries.append({"name": entry.name, "type": kind, "size": st.st_size})
                names_bytes += len(entry.name)
        entries.sort(key=lambda e: e["name"])
        answer = {"entries": entries}
        if truncated:
            answer["truncated"] = True
        return answer

    def exists(self, event, context):
        path = self.resolve(self._field(event, "path", str), follow=False)
        return {"exists": os.path.lexists(path)}

    def remove(self, event, context):
        path = self.resolve(self._field(event, "path", str), follow=False)
        if path == self.workspace:
            raise SandboxPathError("the workspace itself cannot be removed")
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
        return {}

    @staticmethod
    def _decode(text):
        try:
            return base64.b64decode(text, validate=True)
        except ValueError as e:
            raise SandboxRequestError("'data_b64' is not base64: %s" % e) from None

    OPS = {
        "run_code": run_code,
        "run_command": run_command,
        "write_file": write_file,
        "read_file": read_file,
        "list_files": list_files,
        "exists": exists,
        "remove": remove,
    }


def _within(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _raise_timeout(seconds):
    def handler(signum, frame):
        raise SandboxTimeout("the code ran past its timeout of %.3gs and was interrupted" % seconds)
    return handler


def _user_traceback(exc, filename):
    """The exception's traceback from the user's cell on: the sandbox's own
    frames above it are left out."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) or tb is None:
        return traceback.format_exception_only(type(exc), exc)
    return traceback.format_exception(type(exc), exc, tb)
