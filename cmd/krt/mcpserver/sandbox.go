package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	v1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/lifecycle"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// SandboxHandler is the built-in handler of the Python Runtime Server that
// serves a sandbox (docs/sandbox.md).
const SandboxHandler = "kruntimes.sandbox"

// SandboxLabel marks the sandbox Runs krt mcp creates; they are never
// listed as tools (no Run with the handler kruntimes.sandbox is).
const SandboxLabel = "kruntimes.io/sandbox"

const (
	defaultSandboxIdle = 600
	maxSandboxIdle     = 86400
	// sandboxReadyTimeout bounds create_sandbox's wait for Ready.
	sandboxReadyTimeout = 2 * time.Minute
	// maxSandboxOpSeconds is the longest run_code or run_command timeout:
	// the invoke's own bound (--invoke-max-timeout, 55 s) less a margin.
	maxSandboxOpSeconds = 50
)

// sandboxes are the sandbox Runs one MCP session created, as that
// session's caller; they are deleted when the session ends.
type sandboxes struct {
	runs      typedv1alpha1.RunInterface
	runtimes  typedv1alpha1.RuntimeInterface
	runtime   string
	namespace string

	mu    sync.Mutex
	owned map[string]types.UID // by Run name
}

type createSandboxIn struct {
	IdleTimeoutSeconds int `json:"idle_timeout_seconds,omitempty" jsonschema:"seconds without an operation after which the sandbox is deleted (default 600, at most 86400)"`
}

type sandboxIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
}

type runCodeIn struct {
	Sandbox string  `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	Code    string  `json:"code" jsonschema:"Python source; variables, imports and functions stay between calls, and the value of a last expression is the result"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds after which the code is interrupted (at most 50)"`
}

type runCommandIn struct {
	Sandbox string            `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	Cmd     string            `json:"cmd" jsonschema:"a command line, run by /bin/sh -c in the sandbox's workspace"`
	Timeout float64           `json:"timeout,omitempty" jsonschema:"seconds after which the command and every process it started are killed (at most 50)"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"the working directory, a path in the workspace"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"environment variables added to the command's"`
}

type startCommandIn struct {
	Sandbox string            `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	Cmd     string            `json:"cmd" jsonschema:"a command line, run by /bin/sh -c in the sandbox's workspace, in the background"`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"the working directory, a path in the workspace"`
	Env     map[string]string `json:"env,omitempty" jsonschema:"environment variables added to the command's"`
	Stdin   bool              `json:"stdin,omitempty" jsonschema:"keep the command's stdin open for write_stdin (else it reads nothing)"`
}

type commandIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	ID      string `json:"id" jsonschema:"the command's id, as start_command answered it"`
}

type commandOutputIn struct {
	Sandbox     string  `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	ID          string  `json:"id" jsonschema:"the command's id, as start_command answered it"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"wait at most this long for the command to end before answering (at most 50; default 0: answer at once)"`
	TailLines   int64   `json:"tail_lines,omitempty" jsonschema:"the last lines of stdout and of stderr to answer (default 200)"`
}

type killCommandIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	ID      string `json:"id" jsonschema:"the command's id, as start_command answered it"`
	Signal  string `json:"signal,omitempty" jsonschema:"a signal such as SIGINT for the command's process group; by default the command and every process it started are killed"`
}

type writeStdinIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	ID      string `json:"id" jsonschema:"the command's id, as start_command answered it (started with stdin true)"`
	Data    string `json:"data,omitempty" jsonschema:"text to write to the command's stdin"`
	EOF     bool   `json:"eof,omitempty" jsonschema:"close the command's stdin after data"`
}

// defaultCommandTailLines is how many of a command's last lines of each
// stream command_output answers unless asked.
const defaultCommandTailLines = 200

type writeFileIn struct {
	Sandbox       string `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	Path          string `json:"path" jsonschema:"a path in the sandbox's workspace; missing directories are made"`
	Content       string `json:"content,omitempty" jsonschema:"the file's content as text (UTF-8)"`
	ContentBase64 string `json:"content_base64,omitempty" jsonschema:"the file's content in base64, instead of content"`
}

type pathIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	Path    string `json:"path" jsonschema:"a path in the sandbox's workspace"`
}

type listFilesIn struct {
	Sandbox    string `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	Path       string `json:"path,omitempty" jsonschema:"a directory in the sandbox's workspace (default: the workspace)"`
	Recursive  bool   `json:"recursive,omitempty" jsonschema:"list the whole tree below path, depth first, names relative to path (links are not followed)"`
	MaxEntries int    `json:"max_entries,omitempty" jsonschema:"answer at most this many entries (default and at most 1000); truncated says there were more"`
}

type makeDirIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	Path    string `json:"path" jsonschema:"the directory to make in the sandbox's workspace, with its missing parents (a directory already there is fine)"`
}

type moveFileIn struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's name, as create_sandbox answered it"`
	Src     string `json:"src" jsonschema:"the file, link or directory to move, in the sandbox's workspace"`
	Dst     string `json:"dst" jsonschema:"its new path in the workspace: a file there is replaced, a directory there is refused; its directory must exist"`
}

// addSandboxTools adds the sandbox tools to server.
func addSandboxTools(server *mcp.Server, sb *sandboxes) {
	mcp.AddTool(server, &mcp.Tool{
		Name: "create_sandbox",
		Description: "Creates a sandbox: a private Python environment with a workspace directory, where run_code keeps its variables " +
			"between calls and run_command runs programs. Answers its name, which the other sandbox tools take. " +
			"Delete it with delete_sandbox when done; it is deleted when this MCP session ends, or after idle_timeout_seconds without use.",
	}, sb.create)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "run_code",
		Description: "Runs Python code in a sandbox. Answers stdout, stderr, result (the value of a last expression) and error (an exception's name, value and traceback; the sandbox keeps its state).",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in runCodeIn) (*mcp.CallToolResult, any, error) {
		op := map[string]any{"op": "run_code", "code": in.Code}
		return sb.invoke(ctx, in.Sandbox, op, in.Timeout), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "run_command",
		Description: "Runs a shell command in a sandbox's workspace. Answers stdout, stderr, exit_code and timed_out.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in runCommandIn) (*mcp.CallToolResult, any, error) {
		op := map[string]any{"op": "run_command", "cmd": in.Cmd}
		if in.Cwd != "" {
			op["cwd"] = in.Cwd
		}
		if len(in.Env) > 0 {
			op["env"] = in.Env
		}
		return sb.invoke(ctx, in.Sandbox, op, in.Timeout), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name: "start_command",
		Description: "Starts a shell command in the background in a sandbox's workspace (a server, a build, a long script) and answers its id at once. " +
			"Read its output and exit code with command_output; stop it with kill_command; feed it with write_stdin.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in startCommandIn) (*mcp.CallToolResult, any, error) {
		op := map[string]any{"op": "start_command", "cmd": in.Cmd, "stdin": in.Stdin}
		if in.Cwd != "" {
			op["cwd"] = in.Cwd
		}
		if len(in.Env) > 0 {
			op["env"] = in.Env
		}
		return sb.invoke(ctx, in.Sandbox, op, 0), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name: "command_output",
		Description: "Answers a background command's state (running, exit_code) and the last lines of its stdout and stderr so far; " +
			"with wait_seconds it first waits up to that long for the command to end.",
	}, sb.commandOutput)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "kill_command",
		Description: "Kills a background command and every process it started, or sends it one signal.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in killCommandIn) (*mcp.CallToolResult, any, error) {
		op := map[string]any{"op": "kill_command", "id": in.ID}
		if in.Signal != "" {
			op["signal"] = in.Signal
		}
		return sb.invoke(ctx, in.Sandbox, op, 0), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "write_stdin",
		Description: "Writes text to the stdin of a background command started with stdin true; eof closes it.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in writeStdinIn) (*mcp.CallToolResult, any, error) {
		return sb.invoke(ctx, in.Sandbox, map[string]any{"op": "write_stdin", "id": in.ID, "data": in.Data, "eof": in.EOF}, 0), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "write_file",
		Description: "Writes a file (at most 512 KiB) in a sandbox's workspace, replacing it. Answers its size.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in writeFileIn) (*mcp.CallToolResult, any, error) {
		data := in.ContentBase64
		if data == "" {
			data = base64.StdEncoding.EncodeToString([]byte(in.Content))
		} else if in.Content != "" {
			return errorResult("give content or content_base64, not both; nothing was written"), nil, nil
		}
		return sb.invoke(ctx, in.Sandbox, map[string]any{"op": "write_file", "path": in.Path, "data_b64": data}, 0), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "read_file",
		Description: "Reads a file (at most 512 KiB) of a sandbox's workspace. Answers content (text) when it is UTF-8, else content_base64.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, any, error) {
		r := sb.invoke(ctx, in.Sandbox, map[string]any{"op": "read_file", "path": in.Path}, 0)
		return readFileResult(r), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "list_files",
		Description: "Lists a directory of a sandbox's workspace, or with recursive its whole tree: entries with name, type (file, dir, symlink, other), size, mode and mtime; truncated when there were more than max_entries.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in listFilesIn) (*mcp.CallToolResult, any, error) {
		op := map[string]any{"op": "list_files", "recursive": in.Recursive}
		if in.Path != "" {
			op["path"] = in.Path
		}
		if in.MaxEntries != 0 {
			op["max_entries"] = in.MaxEntries
		}
		return sb.invoke(ctx, in.Sandbox, op, 0), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "stat_file",
		Description: "Says what a path of a sandbox's workspace is: type (file, dir, symlink, other), size, mode, mtime, and a link's target. A missing path is a FileNotFoundError.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in pathIn) (*mcp.CallToolResult, any, error) {
		return sb.invoke(ctx, in.Sandbox, map[string]any{"op": "stat", "path": in.Path}, 0), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "make_dir",
		Description: "Makes a directory in a sandbox's workspace, as mkdir -p. Answers created: false when it was already there.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in makeDirIn) (*mcp.CallToolResult, any, error) {
		return sb.invoke(ctx, in.Sandbox, map[string]any{"op": "mkdir", "path": in.Path, "parents": true, "exist_ok": true}, 0), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "move_file",
		Description: "Moves (renames) a file, link or directory within a sandbox's workspace, atomically; a file at dst is replaced, a directory at dst is refused.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in moveFileIn) (*mcp.CallToolResult, any, error) {
		return sb.invoke(ctx, in.Sandbox, map[string]any{"op": "move", "src": in.Src, "dst": in.Dst}, 0), nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "delete_sandbox",
		Description: "Deletes a sandbox: its processes are killed and its workspace removed.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in sandboxIn) (*mcp.CallToolResult, any, error) {
		return sb.delete(ctx, in.Sandbox), nil, nil
	})
}

// create makes a sandbox Run as the caller and waits until it is Ready.
func (sb *sandboxes) create(ctx context.Context, _ *mcp.CallToolRequest, in createSandboxIn) (*mcp.CallToolResult, any, error) {
	idle := in.IdleTimeoutSeconds
	if idle <= 0 {
		idle = defaultSandboxIdle
	}
	if idle > maxSandboxIdle {
		return errorResult(fmt.Sprintf("idle_timeout_seconds is at most %d; no sandbox was created", maxSandboxIdle)), nil, nil
	}
	// A sandbox runs code nobody reviewed: it gets a Pod of its own. A
	// caller who may not read the Runtime is not stopped here.
	rt, err := sb.runtimes.Get(ctx, sb.runtime, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return errorResult(fmt.Sprintf("no sandbox was created: there is no Runtime %s in namespace %s", sb.runtime, sb.namespace)), nil, nil
	case err == nil && rt.Spec.Capacity.Runs > 1:
		return errorResult(fmt.Sprintf("no sandbox was created: Runtime %s has capacity.runs %d, so a sandbox would share its Pod, files and processes with other Runs; krt mcp needs a Runtime with capacity.runs 1", sb.runtime, rt.Spec.Capacity.Runs)), nil, nil
	}
	run := &v1alpha1.Run{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "sandbox-",
			Labels:       map[string]string{SandboxLabel: "true", "app.kubernetes.io/managed-by": "krt-mcp"},
		},
		Spec: v1alpha1.RunSpec{
			Runtime: sb.runtime,
			Mode: v1alpha1.RunMode{Function: &v1alpha1.FunctionMode{
				Handler:            SandboxHandler,
				IdleTimeoutSeconds: ptr.To(int32(idle)),
			}},
		},
	}
	created, err := sb.runs.Create(ctx, run, metav1.CreateOptions{})
	if err != nil {
		return errorResult(fmt.Sprintf("no sandbox was created: %v", err)), nil, nil
	}
	sb.mu.Lock()
	sb.owned[created.Name] = created.UID
	sb.mu.Unlock()
	if err := sb.waitReady(ctx, created); err != nil {
		sb.remove(context.WithoutCancel(ctx), created.Name)
		return errorResult(fmt.Sprintf("the sandbox did not become Ready, and was deleted: %v", err)), nil, nil
	}
	out, _ := json.Marshal(map[string]any{"sandbox": created.Name, "runtime": sb.runtime, "idle_timeout_seconds": idle})
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(out)}},
		StructuredContent: json.RawMessage(out),
	}, nil, nil
}

// waitReady watches run until it is Ready, fails, or sandboxReadyTimeout
// passes.
func (sb *sandboxes) waitReady(ctx context.Context, run *v1alpha1.Run) error {
	ctx, cancel := context.WithTimeout(ctx, sandboxReadyTimeout)
	defer cancel()
	w, err := sb.runs.Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", run.Name).String(),
		ResourceVersion: run.ResourceVersion,
	})
	if err != nil {
		return err
	}
	defer w.Stop()
	last := run
	for {
		if last.UID == run.UID {
			if apimeta.IsStatusConditionTrue(last.Status.Conditions, lifecycle.ConditionReady) {
				return nil
			}
			if lifecycle.IsTerminal(last.Status.Phase) {
				return fmt.Errorf("the Run ended in phase %s", last.Status.Phase)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not Ready after %v (phase %q)", sandboxReadyTimeout, last.Status.Phase)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("the watch of the Run ended")
			}
			switch ev.Type {
			case watch.Deleted:
				return errors.New("the Run was deleted")
			case watch.Error:
				return apierrors.FromObject(ev.Object)
			}
			if r, ok := ev.Object.(*v1alpha1.Run); ok {
				last = r
			}
		}
	}
}

// uidOf is the UID of the sandbox name this session created.
func (sb *sandboxes) uidOf(name string) (types.UID, bool) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	uid, ok := sb.owned[name]
	return uid, ok
}

func (sb *sandboxes) notOwned(name string) *mcp.CallToolResult {
	sb.mu.Lock()
	names := make([]string, 0, len(sb.owned))
	for n := range sb.owned {
		names = append(names, n)
	}
	sb.mu.Unlock()
	sort.Strings(names)
	return errorResult(fmt.Sprintf("no sandbox %q in this session (its sandboxes: %v); create one with create_sandbox; nothing ran", name, names))
}

// invoke sends op to the sandbox once.
func (sb *sandboxes) invoke(ctx context.Context, name string, op map[string]any, timeoutSeconds float64) *mcp.CallToolResult {
	uid, ok := sb.uidOf(name)
	if !ok {
		return sb.notOwned(name)
	}
	if timeoutSeconds < 0 || timeoutSeconds > maxSandboxOpSeconds {
		return errorResult(fmt.Sprintf("timeout is between 0 and %d seconds; nothing ran", maxSandboxOpSeconds))
	}
	var timeout time.Duration
	if timeoutSeconds > 0 {
		op["timeout"] = timeoutSeconds
		// The invocation's deadline leaves the sandbox time to stop the
		// work itself and answer.
		timeout = time.Duration(timeoutSeconds*float64(time.Second)) + 3*time.Second
	}
	input, err := json.Marshal(op)
	if err != nil {
		return errorResult(err.Error())
	}
	id := string(uuid.NewUUID())
	result, err := sb.runs.Invoke(ctx, name, input, typedv1alpha1.InvokeOptions{UID: uid, Timeout: timeout, InvocationID: id})
	return callResult(result, err, id)
}

// readFileResult turns read_file's data_b64 into text content when it is
// UTF-8.
func readFileResult(r *mcp.CallToolResult) *mcp.CallToolResult {
	raw, ok := r.StructuredContent.(json.RawMessage)
	if r.IsError || !ok {
		return r
	}
	var out struct {
		Data string `json:"data_b64"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return r
	}
	data, err := base64.StdEncoding.DecodeString(out.Data)
	if err != nil {
		return r
	}
	answer := map[string]any{"size": len(data)}
	if utf8.Valid(data) {
		answer["content"] = string(data)
	} else {
		answer["content_base64"] = out.Data
	}
	b, _ := json.Marshal(answer)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}
}

func (sb *sandboxes) delete(ctx context.Context, name string) *mcp.CallToolResult {
	if _, ok := sb.uidOf(name); !ok {
		return sb.notOwned(name)
	}
	if err := sb.remove(ctx, name); err != nil {
		return errorResult(fmt.Sprintf("the sandbox %s was not deleted: %v", name, err))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("deleted the sandbox %s", name)}}}
}

// remove deletes the sandbox Run name (its UID as precondition) and forgets
// it; a Run already gone counts as deleted.
func (sb *sandboxes) remove(ctx context.Context, name string) error {
	uid, ok := sb.uidOf(name)
	if !ok {
		return nil
	}
	err := sb.runs.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	sb.mu.Lock()
	delete(sb.owned, name)
	sb.mu.Unlock()
	return nil
}

// removeAll deletes every sandbox of the session, within 10 s; what it
// cannot delete (e.g. the token expired) its idle timeout reclaims.
func (sb *sandboxes) removeAll() {
	sb.mu.Lock()
	names := make([]string, 0, len(sb.owned))
	for n := range sb.owned {
		names = append(names, n)
	}
	sb.mu.Unlock()
	if len(names) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range names {
		if err := sb.remove(ctx, name); err != nil {
			fmt.Fprintf(os.Stderr, "krt mcp: delete the sandbox %s/%s (its idle timeout will reclaim it): %v\n", sb.namespace, name, err)
		}
	}
}

// commandOutput waits for the command as asked (wait_command), then reads
// the tail of each of its streams from its log (runs/log?command=).
func (sb *sandboxes) commandOutput(ctx context.Context, _ *mcp.CallToolRequest, in commandOutputIn) (*mcp.CallToolResult, any, error) {
	if in.WaitSeconds < 0 || in.WaitSeconds > maxSandboxOpSeconds {
		return errorResult(fmt.Sprintf("wait_seconds is between 0 and %d", maxSandboxOpSeconds)), nil, nil
	}
	wait := in.WaitSeconds
	if wait == 0 {
		wait = 0.001 // answer at once
	}
	r := sb.invoke(ctx, in.Sandbox, map[string]any{"op": "wait_command", "id": in.ID}, wait)
	raw, ok := r.StructuredContent.(json.RawMessage)
	if r.IsError || !ok {
		return r, nil, nil
	}
	var answer map[string]any
	if err := json.Unmarshal(raw, &answer); err != nil {
		return errorResult(fmt.Sprintf("wait_command answered %s: %v", raw, err)), nil, nil
	}
	tail := in.TailLines
	if tail <= 0 {
		tail = defaultCommandTailLines
	}
	for _, stream := range []string{"Stdout", "Stderr"} {
		out, err := sb.runs.GetLogs(in.Sandbox, &v1alpha1.RunLogOptions{Command: in.ID, Stream: stream, TailLines: &tail}).DoRaw(ctx)
		if err != nil {
			return errorResult(fmt.Sprintf("read the output of command %s of sandbox %s: %v", in.ID, in.Sandbox, err)), nil, nil
		}
		answer[strings.ToLower(stream)] = string(out)
	}
	b, _ := json.Marshal(answer)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: json.RawMessage(b)}, nil, nil
}
