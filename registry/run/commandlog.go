package run

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"kruntimes.io/kruntimes/apis/kruntimes"
	"kruntimes.io/kruntimes/apis/lifecycle"
	"kruntimes.io/kruntimes/apiserver/runtimedclient"
)

// commandID is what a command id may be: start_command answers short
// ids, and runs/log passes them on to the Runtime Server.
var commandID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Within a follow of a command, a broken stream (runtimed restarting) is
// reopened every commandRetry, for at most commandRetryFor.
const (
	commandRetry    = 200 * time.Millisecond
	commandRetryFor = 30 * time.Second
)

// followCommand answers runs/log?command=ID: the output of a background
// command of the function Run's current registration, from its runtimed.
// The command must exist when the request comes (404 otherwise, before any
// byte of the answer); with follow the answer ends when the command ends,
// without it ends once what the command wrote so far was sent. A command
// lives and dies with its registration: a follow ends when the Run moves
// to another attempt or Pod.
func (r *LogREST) followCommand(ctx context.Context, w http.ResponseWriter, namespace string, run *kruntimes.Run, o *kruntimes.RunLogOptions, responder rest.Responder) {
	logger := klog.FromContext(ctx).WithValues("run", klog.KRef(namespace, run.Name), "command", o.Command)
	if run.Status.Phase != lifecycle.Ready || run.Status.AssignedPod == "" {
		responder.Error(r.noCommand(run, o.Command, fmt.Sprintf("the Run is %s, not Ready", run.Status.Phase)))
		return
	}
	client, err := r.router.Runtimed(namespace, run.Status.AssignedPod, run.Status.AssignedPodUID)
	if err != nil {
		responder.Error(err)
		return
	}
	key := runtimedclient.LogKey{RunUID: run.UID, Attempt: run.Status.Attempt, PodUID: run.Status.AssignedPodUID, Function: true, Command: o.Command}
	stream, first, err := openCommand(ctx, client, key, 0)
	if err != nil {
		if errors.Is(err, runtimedclient.ErrLogNotFound) {
			responder.Error(r.noCommand(run, o.Command, "its registration has no such command"))
		} else {
			responder.Error(apierrors.NewServiceUnavailable(fmt.Sprintf("cannot reach the command %q of Run %s on its Pod %s: %v; try again", o.Command, run.Name, run.Status.AssignedPod, err)))
		}
		return
	}
	f := startFollow(w, o)
	defer func() {
		_, _ = f.caughtUp()
		f.flush()
	}()
	retryUntil := time.Time{}
	for {
		done, err := f.relay(stream, first, !o.Follow)
		if done {
			return
		}
		// The stream broke before the command ended: the runtimed or its
		// connection restarted. Reopen from where the answer stands.
		if retryUntil.IsZero() {
			retryUntil = time.Now().Add(commandRetryFor)
		}
		logger.V(4).Info("Following a command broke; reopening", "err", err, "offset", f.offset)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(commandRetry):
			}
			stream, first, err = openCommand(ctx, client, key, f.offset)
			if err == nil {
				retryUntil = time.Time{}
				break
			}
			if errors.Is(err, runtimedclient.ErrLogNotFound) || errors.Is(err, runtimedclient.ErrLogPastEnd) ||
				errors.Is(err, runtimedclient.ErrLogNotAdmitted) || time.Now().After(retryUntil) {
				// The registration, and the command with it, is gone.
				logger.V(2).Info("A followed command is no longer reachable", "err", err)
				return
			}
		}
	}
}

// noCommand is the 404 of a command a Run does not have.
func (r *LogREST) noCommand(run *kruntimes.Run, command, why string) error {
	err := apierrors.NewNotFound(kruntimes.Resource("runs/log"), run.Name)
	err.ErrStatus.Message = fmt.Sprintf("Run %s has no command %q: %s (a command lives as long as its sandbox's registration)", run.Name, command, why)
	return err
}

// openCommand opens a follow of key's command from offset, and reads its
// first response, which the Runtime Server sends at once: a command that
// does not exist fails here, before the answer starts.
func openCommand(ctx context.Context, client runtimedclient.Interface, key runtimedclient.LogKey, offset int64) (runtimedclient.LogStream, *runtimedclient.LogResponse, error) {
	stream, err := client.FollowLog(ctx, key, offset)
	if err != nil {
		return nil, nil, err
	}
	first, err := stream.Recv()
	if errors.Is(err, io.EOF) {
		return nil, nil, nil // the command ended, and nothing is left from offset on
	}
	if err != nil {
		return nil, nil, err
	}
	return stream, first, nil
}

// relay writes first, when set, and then what stream sends, until the
// stream ends (done), the client goes away (done), or, with once, the
// answer caught up with what was written (done). Otherwise it returns the
// stream's error.
func (f *follower) relay(stream runtimedclient.LogStream, first *runtimedclient.LogResponse, once bool) (bool, error) {
	for resp := first; ; {
		if resp != nil {
			end := resp.Offset
			for _, c := range resp.Chunks {
				end += int64(len(c.Data))
			}
			if done, err := f.chunks(resp.SkippedBytes, resp.Offset, resp.Chunks); done {
				return true, err
			}
			if end >= resp.Written {
				if done, err := f.caughtUp(); done || once {
					return true, err
				}
			}
			f.flush()
		}
		if stream == nil {
			return true, nil
		}
		var err error
		resp, err = stream.Recv()
		if errors.Is(err, io.EOF) {
			return true, nil // the command ended and this was its last byte
		}
		if err != nil {
			return false, err
		}
	}
}
