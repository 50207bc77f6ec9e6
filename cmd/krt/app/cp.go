package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	kruntimesv1alpha1 "kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	typedv1alpha1 "kruntimes.io/kruntimes/client/clientset/versioned/typed/kruntimes/v1alpha1"
)

// cpOptions are krt cp's source and destination: exactly one of them is in
// a sandbox (SANDBOX:PATH), the other a local file or "-".
type cpOptions struct {
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams

	sandbox, remote, local string
	upload                 bool
	// recursive copies a directory's contents, as a tar archive on the
	// way.
	recursive bool
}

func newCmdCp(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams, code *int) *cobra.Command {
	o := &cpOptions{configFlags: flags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "cp [-r] SRC DST [-n NAMESPACE]",
		Short: "Copy a file or a directory into or out of a sandbox, of any size",
		Long: `Copy one file between this machine and a sandbox (a function Run with the
handler kruntimes.sandbox), as kubectl cp copies one to a Pod: the side in
the sandbox is SANDBOX:PATH, with PATH in its workspace (relative to it, or
absolute inside it); the other is a local file, or - for stdin or stdout.
The bytes stream through runs/files: a file into the sandbox replaces the
one there atomically (missing directories are made), and neither side holds
the whole file. Through kube-apiserver a copy must end within its request
timeout (60 s by default).

With -r, SRC is a directory whose contents go into the directory DST (made
when missing, merged with what is there), as tar -x -C DST would put them:
files, directories and symbolic links (stored as links, never followed).
Into a sandbox, the copy is all or nothing; out of one, entries that would
leave DST (a link pointing out of it) are skipped and named on stderr. With
-r, - is a tar archive on stdin or stdout.

  krt cp data.csv box:input/data.csv
  krt cp box:out/report.pdf report.pdf
  krt cp -r ./src box:src
  krt cp -r box:results ./results
  krt cp -r box:results - | tar tv`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				*code = ExitUsage
				return err
			}
			if err := o.Run(cmd.Context()); err != nil {
				*code = ExitError
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&o.recursive, "recursive", "r", false, "Copy the contents of the directory SRC into the directory DST.")
	return cmd
}

// Complete tells the sandbox's side from the local one.
func (o *cpOptions) Complete(args []string) error {
	src, dst := args[0], args[1]
	srcSandbox, srcPath, srcRemote := remotePath(src)
	dstSandbox, dstPath, dstRemote := remotePath(dst)
	switch {
	case srcRemote == dstRemote:
		return errors.New("name exactly one side in a sandbox as SANDBOX:PATH: krt cp LOCAL SANDBOX:PATH, or krt cp SANDBOX:PATH LOCAL")
	case srcRemote:
		o.sandbox, o.remote, o.local = srcSandbox, srcPath, dst
	default:
		o.sandbox, o.remote, o.local, o.upload = dstSandbox, dstPath, src, true
	}
	if o.remote == "" {
		return fmt.Errorf("%s names no path in the sandbox: SANDBOX:PATH", o.sandbox+":")
	}
	return nil
}

// remotePath splits SANDBOX:PATH. A local path with a colon is one that
// starts with ./ or / (as kubectl cp reads it), or one whose part before
// the colon is no Run name.
func remotePath(arg string) (sandbox, path string, ok bool) {
	if strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") || arg == "-" {
		return "", "", false
	}
	sandbox, path, ok = strings.Cut(arg, ":")
	if !ok || sandbox == "" || strings.ContainsAny(sandbox, `/\`) {
		return "", "", false
	}
	return sandbox, path, true
}

// Run copies the file, or with -r the directory.
func (o *cpOptions) Run(ctx context.Context) error {
	runs, _, err := clientFor(o.configFlags)
	if err != nil {
		return err
	}
	if o.upload {
		if o.local != "-" {
			fi, err := os.Stat(o.local)
			if err != nil {
				return err
			}
			if fi.IsDir() != o.recursive {
				if o.recursive {
					return fmt.Errorf("%s is not a directory: copy a file without -r", o.local)
				}
				return fmt.Errorf("%s is a directory: copy it with -r", o.local)
			}
		}
		if o.recursive {
			return o.putDirectory(ctx, runs)
		}
		in := io.Reader(o.In)
		if o.local != "-" {
			f, err := os.Open(o.local)
			if err != nil {
				return err
			}
			defer f.Close()
			in = f
		}
		_, err := runs.PutFile(ctx, o.sandbox, o.remote, in)
		return err
	}
	req := runs.GetFile(o.sandbox, o.remote)
	if o.recursive {
		req = runs.GetArchive(o.sandbox, o.remote, kruntimesv1alpha1.RunFilesArchiveTar)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	switch {
	case o.local == "-":
		_, err = io.Copy(o.Out, body)
		return err
	case o.recursive:
		out, err := extractTar(body, o.local)
		for _, s := range out.skipped {
			fmt.Fprintf(o.ErrOut, "krt cp: skipped %s: it would leave %s, or is not a file, directory or link\n", s, o.local)
		}
		if err != nil {
			return fmt.Errorf("the copy broke off after %d files: %w; what was copied stays in %s", out.files, err, o.local)
		}
		return nil
	}
	return writeAtomically(o.local, body)
}

// putDirectory streams the local directory (or, for -, the tar archive on
// stdin) into the sandbox, tarred as it is read.
func (o *cpOptions) putDirectory(ctx context.Context, runs typedv1alpha1.RunInterface) error {
	archive := io.Reader(o.In)
	if o.local != "-" {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarDirectory(o.local, pw)) }()
		// Whatever ends the copy, the walk ends with it.
		defer pr.Close()
		archive = pr
	}
	_, _, err := runs.PutArchive(ctx, o.sandbox, o.remote, archive)
	return err
}

// writeAtomically writes what r reads to path through a temporary file
// beside it, so that a copy that breaks off leaves path as it was.
func writeAtomically(path string, r io.Reader) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".krt-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("the copy broke off: %w; %s is unchanged", err, path)
	}
	// As a new file's mode under a usual umask, or the replaced file's.
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
