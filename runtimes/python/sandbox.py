# kruntimes built-in sandbox handler (handler "kruntimes.sandbox").
#
# The worker (worker.py) executes this file instead of importing a user's
# module when a function Run names the handler "kruntimes.sandbox", and
# calls make_handler(workspace, reaper, limits, events=...) once. The handler
# serves one JSON object per invocation, {"op": ..., ...}; see
# docs/sandbox.md for the protocol. The registration's working directory is
# the sandbox's workspace: file operations resolve inside it and refuse any
# path that leaves it.
#
# Every operation runs on the worker's main thread, one at a time (the
# Runtime Server lets one invocation of a registration be in flight). A
# background command (start_command) has a thread of its own that streams
# its output to the Runtime Server (events, the worker's fd 5) and records
# how it ended: the commands' table and their status are shared with those
# threads, under Sandbox.lock. Only the main thread adds or forgets a
# command and touches a command's stdin.
import ast
import base64
import builtins
import errno
import json
import linecache
import os
import selectors
import shutil
import signal
import select
import stat
import subprocess
import sys
import threading
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


def make_handler(workspace, reaper, limits, events=None, commands_started=0):
    return Sandbox(workspace, reaper, limits, events, commands_started).handle


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


class _NoEvents:
    """Where background commands report when the worker gave no events."""

    def started(self, command_id):
        pass

    def output(self, command_id, stream, data):
        pass

    def ended(self, command_id, exit_code):
        pass


class _Command:
    """A background command. running, exit_code and timed_out change on
    its thread, under Sandbox.lock; done is set once they are final and its
    end was reported."""

    def __init__(self, command_id, cmd):
        self.id = command_id
        self.cmd = cmd
        self.proc = None
        self.pid = None
        # Our end of the command's stdin when it was started with a pipe
        # there; None once closed, and for a command that reads /dev/null.
        self.stdin = None
        self.has_stdin = False
        self.running = True
        self.exit_code = None
        self.timed_out = False
        self.done = threading.Event()


class Sandbox:
    def __init__(self, workspace, reaper, limits, events=None, commands_started=0):
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
        self.max_running = int(limits.get("commands_running", 16))
        self.max_ended = int(limits.get("commands_ended", 64))
        self.namespace = {"__name__": "__main__", "__builtins__": builtins}
        self.cells = 0
        self.events = events if events is not None else _NoEvents()
        self.lock = threading.Lock()
        # id → _Command, in start order.
        self.commands = {}
        self.commands_started = int(commands_started)

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
    def _seconds(event, name):
        value = event.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            raise SandboxRequestError("%r must be a positive number of seconds or null" % name)
        return value

    @classmethod
    def _timeout(cls, event, context):
        """The seconds an operation may take: the request's own timeout,
        and in any case a little less than the invocation's deadline, so
        that the sandbox stops the work itself before the Runtime Server
        would kill the worker and its state with it."""
        timeout = cls._seconds(event, "timeout")
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
        timeout = self._timeout(event, context)
        argv, program, cwd, env = self._prepare(event)
        if program is None:
            return {"stdout": "", "stderr": "%s: command not found\n" % argv[0], "exit_code": 127, "timed_out": False}
        try:
            proc = self._popen(argv, program, cwd, env, subprocess.DEVNULL)
        except OSError as e:
            stderr, code = _start_failure(argv, e)
            return {"stdout": "", "stderr": stderr, "exit_code": code, "timed_out": False}

        deadline = time.monotonic() + timeout if timeout is not None else None
        stdout, stderr, timed_out = self._collect(proc, deadline)
        code = _exit_code(proc.returncode)
        out, out_cut = _bounded_text(stdout, self.max_output)
        err, err_cut = _bounded_text(stderr, self.max_output)
        answer = {"stdout": out, "stderr": err, "exit_code": code, "timed_out": timed_out}
        if out_cut:
            answer["stdout_truncated"] = True
        if err_cut:
            answer["stderr_truncated"] = True
        return answer

    def _prepare(self, event):
        """The argv, program, working directory and environment of the
        command a request names. program is None when it is not found."""
        cmd = event.get("cmd")
        if isinstance(cmd, str):
            argv = ["/bin/sh", "-c", cmd]
        elif isinstance(cmd, list) and cmd and all(isinstance(a, str) for a in cmd):
            argv = list(cmd)
        else:
            raise SandboxRequestError("'cmd' must be a string (run by /bin/sh -c) or a non-empty list of strings")
        if any("\0" in a for a in argv):
            raise SandboxRequestError("'cmd' contains a NUL byte, which no program can receive")
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
            program = shutil.which(program, path=env.get("PATH", os.defpath))
        elif not os.path.isabs(program):
            program = os.path.join(cwd, program)
        return argv, program, cwd, env

    def _popen(self, argv, program, cwd, env, stdin):
        if self.reaper:
            # The reaper is a child subreaper: every descendant of the
            # command stays in its subtree, even one that left the process
            # group, and SIGTERM to the reaper kills the whole subtree.
            exe, arg0 = self.reaper
            args, executable = [arg0, "0", program] + argv, exe
        else:
            args, executable = argv, program
        return subprocess.Popen(
            args, executable=executable, cwd=cwd, env=env,
            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, close_fds=True,
        )

    def _stop(self, proc):
        """Kills the command and every process it started."""
        if proc.returncode is not None:
            return  # reaped: its pid may be another process's by now
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
        buffers = {"stdout": bytearray(), "stderr": bytearray()}

        def keep_head(stream, chunk):
            buf = buffers[stream]
            if len(buf) < keep:
                buf += chunk[:keep - len(buf)]

        timed_out = self._pump(proc, deadline, keep_head)
        return bytes(buffers["stdout"]), bytes(buffers["stderr"]), timed_out

    def _pump(self, proc, deadline, on_chunk):
        """Hands each read of the command's output to on_chunk(stream,
        data), stream "stdout" or "stderr", until both streams end; stops
        the command at the deadline. Returns once the command exited, with
        whether it was stopped."""
        streams = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
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
                    on_chunk(streams[key.fd], chunk)
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
        return timed_out

    # --- background commands ----------------------------------------------

    def start_command(self, event, context):
        timeout = self._seconds(event, "timeout")
        has_stdin = self._field(event, "stdin", bool, required=False, default=False)
        argv, program, cwd, env = self._prepare(event)
        with self.lock:
            self._forget_ended_locked()
            running = sum(1 for c in self.commands.values() if c.running)
            if running >= self.max_running:
                raise SandboxRequestError("%d commands are running, as many as a sandbox runs at once: wait for one to end (wait_command) or stop one (kill_command)" % running)
            self.commands_started += 1
            command = _Command(str(self.commands_started), event["cmd"])
            self.commands[command.id] = command
        self.events.started(command.id)
        # A command that cannot start is one that failed at once, as a
        # shell would report it: the message is its stderr.
        failure = None
        if program is None:
            failure = "%s: command not found\n" % argv[0], 127
        else:
            try:
                command.proc = self._popen(argv, program, cwd, env, subprocess.PIPE if has_stdin else subprocess.DEVNULL)
            except OSError as e:
                failure = _start_failure(argv, e)
            except BaseException:
                self._ended(command, None, False)
                raise
        if failure is not None:
            self.events.output(command.id, "stderr", failure[0].encode("utf-8", "replace"))
            self._ended(command, failure[1], False)
            return {"id": command.id, "pid": None}
        if has_stdin:
            command.stdin = command.proc.stdin
            command.has_stdin = True
            # write_stdin waits for room with a deadline, not in write().
            os.set_blocking(command.stdin.fileno(), False)
        command.pid = self._program_pid(command.proc)
        deadline = time.monotonic() + timeout if timeout is not None else None
        threading.Thread(target=self._follow, args=(command, deadline), name="command-" + command.id, daemon=True).start()
        return {"id": command.id, "pid": command.pid}

    def _program_pid(self, proc):
        """The pid of the program proc runs: under the reaper, the child of
        the reaper (forked from any of its threads) that leads a process
        group of its own, as the reaper makes the program do before it
        executes it; so a signal sent to that group once start_command
        answered reaches the program. When the program ended before it was
        seen (or /proc does not list children), the reaper's pid."""
        if not self.reaper or not _PROC_CHILDREN:
            return proc.pid
        tasks = "/proc/%d/task" % proc.pid
        give_up = time.monotonic() + 5
        while time.monotonic() < give_up:
            try:
                names = os.listdir(tasks)
            except OSError:
                return proc.pid
            for task in names:
                try:
                    with open("%s/%s/children" % (tasks, task)) as f:
                        children = f.read().split()
                except OSError:
                    continue  # a thread that just ended
                for child in children:
                    if _process_group(child) == child:
                        return int(child)
            if proc.poll() is not None:
                return proc.pid
            time.sleep(0.001)
        return proc.pid

    def _follow(self, command, deadline):
        """The command's thread: streams its output, then reports its end."""
        def send(stream, chunk):
            self.events.output(command.id, stream, chunk)

        try:
            timed_out = self._pump(command.proc, deadline, send)
            code = _exit_code(command.proc.returncode)
        except BaseException:  # noqa: B902 -- the command must end in any case
            self._stop(command.proc)
            timed_out, code = False, None
            traceback.print_exc()
        self._ended(command, code, timed_out)

    def _ended(self, command, exit_code, timed_out):
        # Reported before it is recorded: an answer that says the command
        # ended comes after its end reached the Runtime Server.
        self.events.ended(command.id, exit_code)
        with self.lock:
            command.running = False
            command.exit_code = exit_code
            command.timed_out = timed_out
        command.done.set()

    def _forget_ended_locked(self):
        """Forgets the oldest ended commands beyond max_ended."""
        ended = [c for c in self.commands.values() if not c.running]
        for c in ended[:max(0, len(ended) - self.max_ended)]:
            del self.commands[c.id]
            if c.stdin is not None:
                c.stdin.close()
                c.stdin = None

    def _command(self, event):
        command_id = self._field(event, "id", str)
        with self.lock:
            self._forget_ended_locked()
            command = self.commands.get(command_id)
        if command is None:
            raise SandboxRequestError("no command %r: list_commands shows the running ones and the last %d that ended" % (command_id, self.max_ended))
        return command

    def _status(self, command):
        with self.lock:
            return {"id": command.id, "running": command.running, "exit_code": command.exit_code, "timed_out": command.timed_out}

    def wait_command(self, event, context):
        command = self._command(event)
        command.done.wait(self._timeout(event, context))
        return self._status(command)

    def kill_command(self, event, context):
        command = self._command(event)
        sig = event.get("signal")
        signum = None if sig is None else _signal_number(sig)
        with self.lock:
            if not command.running or command.proc is None:
                return {}
        if signum is None:
            self._stop(command.proc)
        elif command.proc.poll() is None:
            try:
                # The program leads a process group of its own.
                os.killpg(command.pid, signum)
            except ProcessLookupError:
                pass
        return {}

    def write_stdin(self, event, context):
        command = self._command(event)
        if "data" in event and "data_b64" in event:
            raise SandboxRequestError("pass 'data' or 'data_b64', not both")
        if event.get("data_b64") is not None:
            data = self._decode(self._field(event, "data_b64", str))
        else:
            data = self._field(event, "data", str, required=False, default="").encode("utf-8")
        eof = self._field(event, "eof", bool, required=False, default=False)
        if not command.has_stdin:
            raise SandboxRequestError("command %s reads /dev/null: start it with \"stdin\": true to write to it" % command.id)
        if command.stdin is None:
            raise SandboxRequestError("the stdin of command %s was closed (eof)" % command.id)
        timeout = self._timeout(event, context)
        deadline = time.monotonic() + timeout if timeout is not None else None
        fd = command.stdin.fileno()
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    # The command reads slower than it is written to: what
                    # was written so far is answered, the rest is the
                    # caller's to send again.
                    return {"written": written}
                _, ready, _ = select.select([], [fd], [], wait)
                if ready:
                    try:
                        written += os.write(fd, view[written:])
                    except BlockingIOError:
                        pass
        except BrokenPipeError:
            command.stdin.close()
            command.stdin = None
            raise SandboxRequestError("command %s no longer reads its stdin: it closed it or ended" % command.id) from None
        if eof:
            command.stdin.close()
            command.stdin = None
        return {"written": written}

    def list_commands(self, event, context):
        with self.lock:
            self._forget_ended_locked()
            return {"commands": [
                {"id": c.id, "cmd": c.cmd, "running": c.running, "exit_code": c.exit_code, "pid": c.pid}
                for c in self.commands.values()
            ]}

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

    def stat_path(self, event, context):
        """What the entry at path is: the entry itself, as lstat sees it (a
        symbolic link is a "symlink" with its "target")."""
        given = self._field(event, "path", str)
        path = self.resolve(given, follow=False)
        st = os.lstat(path)
        answer = {"path": given, "name": os.path.basename(path) if path != self.workspace else "."}
        answer.update(_entry(st))
        if stat.S_ISLNK(st.st_mode):
            answer["target"] = os.readlink(path)
        return answer

    def list_files(self, event, context):
        """The entries of a directory; with recursive, of its whole tree,
        depth first: each directory's entries by name, a directory followed
        by its own. Names are relative to the directory listed. Links are
        listed, never followed. At most max_entries entries (and 64 KiB of
        names) come back, else "truncated": which entries made it in a
        directory whose entries did not all fit is unspecified."""
        path = self.resolve(self._field(event, "path", str, required=False, default="."))
        recursive = self._field(event, "recursive", bool, required=False, default=False)
        limit = self._field(event, "max_entries", int, required=False, default=self.max_entries)
        if isinstance(limit, bool) or limit < 1:
            raise SandboxRequestError("'max_entries' must be a positive integer")
        limit = min(limit, self.max_entries)
        timeout = self._timeout(event, context)
        deadline = time.monotonic() + timeout if timeout is not None else None
        if not os.path.isdir(path):
            # What os.scandir would raise, with the path as the caller gave it.
            if os.path.lexists(path):
                raise NotADirectoryError("%r is not a directory" % event.get("path", "."))
            raise FileNotFoundError("no directory %r in the workspace" % event.get("path", "."))
        listing = _Listing(limit, _MAX_NAMES_BYTES, deadline)
        listing.walk(path, "", recursive)
        answer = {"entries": listing.entries}
        if listing.truncated:
            answer["truncated"] = True
        return answer

    def mkdir(self, event, context):
        """Makes the directory path; with parents, the missing ones on the
        way; with exist_ok, a directory already there is not an error."""
        given = self._field(event, "path", str)
        parents = self._field(event, "parents", bool, required=False, default=False)
        exist_ok = self._field(event, "exist_ok", bool, required=False, default=False)
        path = self.resolve(given)
        if os.path.isdir(path):
            if not exist_ok:
                raise FileExistsError("%r already exists" % given)
            return {"created": False}
        if parents:
            os.makedirs(path, exist_ok=False)
        else:
            os.mkdir(path)
        return {"created": True}

    def move(self, event, context):
        """Renames src to dst, both in the workspace, as rename(2) does: a
        file (or link) at dst is replaced atomically; a directory at dst is
        refused, as is moving a directory into itself. Links are moved, not
        followed. dst's parent must exist."""
        src_given = self._field(event, "src", str)
        dst_given = self._field(event, "dst", str)
        src = self.resolve(src_given, follow=False)
        dst = self.resolve(dst_given, follow=False)
        if src == self.workspace or dst == self.workspace:
            raise SandboxPathError("the workspace itself cannot be moved or replaced")
        os.lstat(src)  # FileNotFoundError for a missing src
        if os.path.isdir(dst) and not os.path.islink(dst):
            if src == dst:
                return {}
            raise IsADirectoryError("%r is a directory: move refuses to replace one; name a path inside it, or remove it first" % dst_given)
        os.replace(src, dst)
        return {}

    def exists(self, event, context):
        path = self.resolve(self._field(event, "path", str), follow=False)
        return {"exists": os.path.lexists(path)}

    def remove(self, event, context):
        """Removes the file, link or directory path (a link itself, never
        what it points to). A directory goes with its contents unless
        recursive is false, which removes only an empty one."""
        given = self._field(event, "path", str)
        recursive = self._field(event, "recursive", bool, required=False, default=True)
        path = self.resolve(given, follow=False)
        if path == self.workspace:
            raise SandboxPathError("the workspace itself cannot be removed")
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path)
        elif recursive:
            shutil.rmtree(path)
        else:
            try:
                os.rmdir(path)
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise OSError(e.errno, "%r is a directory that is not empty: pass \"recursive\": true to remove it with its contents" % given) from None
                raise
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
        "start_command": start_command,
        "wait_command": wait_command,
        "kill_command": kill_command,
        "write_stdin": write_stdin,
        "list_commands": list_commands,
        "write_file": write_file,
        "read_file": read_file,
        "list_files": list_files,
        "stat": stat_path,
        "mkdir": mkdir,
        "move": move,
        "exists": exists,
        "remove": remove,
    }


# Whether /proc lists a thread's children (Linux with CONFIG_PROC_CHILDREN).
_PROC_CHILDREN = os.path.exists("/proc/thread-self/children")


def _process_group(pid):
    """The process group of pid (a string), as a string; None when gone."""
    try:
        with open("/proc/%s/stat" % pid) as f:
            stat_line = f.read()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces and parentheses.
    fields = stat_line[stat_line.rfind(")") + 2:].split()
    return fields[2] if len(fields) > 2 else None


def _exit_code(returncode):
    """returncode as a shell reports it: 128+n for death by signal n."""
    if returncode is not None and returncode < 0:
        return 128 - returncode
    return returncode


def _start_failure(argv, e):
    """The stderr and exit code of a program that could not start."""
    return "%s: %s\n" % (argv[0], e.strerror or e), 126 if isinstance(e, PermissionError) else 127


def _signal_number(value):
    """A signal named as "SIGINT", "INT" or a number."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value in signal.valid_signals():
            return value
    elif isinstance(value, str):
        name = value.strip().upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        try:
            return signal.Signals[name].value
        except KeyError:
            pass
    raise SandboxRequestError("'signal' must name a signal, as \"SIGINT\", \"INT\" or 2; got %r" % (value,))


def _within(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


# How many bytes of names one list_files answers at most: with the JSON of
# the entries, well within an invocation's output even when every byte of
# a name is escaped.
_MAX_NAMES_BYTES = 64 * 1024


def _entry(st):
    """The type, size, permission bits and modification time of an entry."""
    if stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISREG(st.st_mode):
        kind = "file"
    else:
        kind = "other"
    return {"type": kind, "size": st.st_size, "mode": stat.S_IMODE(st.st_mode), "mtime": st.st_mtime}


class _Listing:
    """The entries list_files gathers, within its bounds: it holds at most
    the entries it answers, and of each directory on the way down at most
    as many as it still has room for."""

    def __init__(self, limit, names_limit, deadline):
        self.entries = []
        self.limit = limit
        self.names_left = names_limit
        self.deadline = deadline
        self.truncated = False

    def walk(self, directory, prefix, recursive):
        """Adds the entries of directory (names prefixed with prefix), and
        with recursive those below it; False once the bounds stopped it."""
        room = self.limit - len(self.entries)
        found = []
        try:
            with os.scandir(directory) as it:
                for entry in it:
                    if len(found) > room:
                        break
                    try:
                        found.append((entry.name, entry.stat(follow_symlinks=False)))
                    except OSError:
                        continue  # removed meanwhile
        except OSError:
            if prefix == "":
                raise
            return True  # a directory below that went away or may not be read
        found.sort(key=lambda e: e[0])
        for name, st in found:
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.truncated = True
                return False
            rel = prefix + name
            self.names_left -= len(rel.encode("utf-8", "surrogateescape"))
            if len(self.entries) >= self.limit or self.names_left < 0:
                self.truncated = True
                return False
            entry = {"name": rel}
            entry.update(_entry(st))
            self.entries.append(entry)
            if recursive and stat.S_ISDIR(st.st_mode):
                if not self.walk(os.path.join(directory, name), rel + "/", True):
                    return False
        return True


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
