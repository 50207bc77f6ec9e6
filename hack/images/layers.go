package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user every image runs as, distroless's nonroot.
const (
	nonrootUID  = 65532
	nonrootName = "nonroot"
	nonrootHome = "/home/nonroot"
)

// binDir is where the images put their binaries, as Kubernetes' own images
// do; kruntimes-reaper must sit beside kruntimes-runtime (runtimes/process).
const binDir = "/usr/local/bin"

// caBundlePath is where Go (crypto/x509) and Debian look for CA certificates.
const caBundlePath = "/etc/ssl/certs/ca-certificates.crt"

// defaultPath is the PATH of the Go images, and of a base that sets none.
const defaultPath = "PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin"

// layerEntry is one file or directory of a layer, with its contents either
// in Data or in the file at Source.
type layerEntry struct {
	Header tar.Header
	Data   []byte
	Source string
}

func dirEntry(name string, mode int64, uid int) layerEntry {
	return layerEntry{Header: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid}}
}

func dataEntry(name string, mode int64, data []byte) layerEntry {
	return layerEntry{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, Data: data}
}

// newLayer returns a layer of entries, every one owned by root unless its
// header says otherwise and dated mtime, so the same entries give the same
// digest. The tar is written anew each time the layer is read, from Data
// or the Source files; its gzip is kept after the first.
func newLayer(entries []layerEntry, mtime time.Time, mediaType types.MediaType) (v1.Layer, error) {
	for i := range entries {
		entries[i].Header.ModTime = mtime
		if entries[i].Source != "" {
			info, err := os.Stat(entries[i].Source)
			if err != nil {
				return nil, err
			}
			entries[i].Header.Size = info.Size()
		}
	}
	opener := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, entries)) }()
		return pr, nil
	}
	return tarball.LayerFromOpener(opener, tarball.WithMediaType(mediaType), tarball.WithCompressedCaching)
}

func writeTar(w io.Writer, entries []layerEntry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := e.Header
		if err := tw.WriteHeader(&hdr); err != nil {
			return err
		}
		switch {
		case e.Source != "":
			f, err := os.Open(e.Source)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
			if n != hdr.Size {
				return fmt.Errorf("%s changed while it was read", e.Source)
			}
		case len(e.Data) > 0:
			if _, err := tw.Write(e.Data); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// distrolessEntries are what a static Go binary expects of a system, as
// distroless/static:nonroot has them: users root and nonroot, /tmp for
// os.TempDir, a home for nonroot, the CA certificates for TLS, and
// nsswitch.conf so that the pure-Go resolver reads /etc/hosts first.
func distrolessEntries(caBundle []byte) []layerEntry {
	passwd := "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		passwdLine()
	group := "root:x:0:\nnobody:x:65534:\n" + groupLine()
	return []layerEntry{
		dirEntry("etc", 0o755, 0),
		dataEntry("etc/group", 0o644, []byte(group)),
		dataEntry("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")),
		dataEntry("etc/passwd", 0o644, []byte(passwd)),
		dirEntry("etc/ssl", 0o755, 0),
		dirEntry("etc/ssl/certs", 0o755, 0),
		dataEntry(strings.TrimPrefix(caBundlePath, "/"), 0o644, caBundle),
		dirEntry("home", 0o755, 0),
		dirEntry(strings.TrimPrefix(nonrootHome, "/"), 0o700, nonrootUID),
		dirEntry("root", 0o700, 0),
		dirEntry("tmp", 0o1777, 0),
		dirEntry("usr", 0o755, 0),
		dirEntry("usr/local", 0o755, 0),
		dirEntry("usr/local/bin", 0o755, 0),
	}
}

func passwdLine() string {
	return fmt.Sprintf("%s:x:%d:%d:%s:%s:/sbin/nologin\n", nonrootName, nonrootUID, nonrootUID, nonrootName, nonrootHome)
}

func groupLine() string { return fmt.Sprintf("%s:x:%d:\n", nonrootName, nonrootUID) }

// binaryEntries puts each binary of binaries (files in dir) at
// /usr/local/bin/<name>. Parent directories are left to the base.
func binaryEntries(dir string, binaries []string) []layerEntry {
	entries := make([]layerEntry, len(binaries))
	for i, name := range binaries {
		entries[i] = layerEntry{
			Header: tar.Header{Typeflag: tar.TypeReg, Name: path.Join(strings.TrimPrefix(binDir, "/"), name), Mode: 0o755},
			Source: filepath.Join(dir, name),
		}
	}
	return entries
}

// nonrootEntries returns what base lacks for user 65532: its /etc/passwd and
// /etc/group with a nonroot line appended where no entry has that id, and
// a home. Nil when base has both entries. A base without /etc/passwd gets
// the Go images' users.
func nonrootEntries(base v1.Image) ([]layerEntry, error) {
	files, err := readFiles(base, "etc/passwd", "etc/group")
	if err != nil {
		return nil, err
	}
	passwd, group := files["etc/passwd"], files["etc/group"]
	hasUser, hasGroup := hasID(passwd, 2), hasID(group, 2)
	if hasUser && hasGroup {
		return nil, nil
	}
	if passwd == nil {
		passwd = &baseFile{Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\n")}
	}
	if group == nil {
		group = &baseFile{Mode: 0o644, Data: []byte("root:x:0:\n")}
	}
	if !hasUser {
		passwd.Data = appendLine(passwd.Data, passwdLine())
	}
	if !hasGroup {
		group.Data = appendLine(group.Data, groupLine())
	}
	return []layerEntry{
		dataEntry("etc/group", group.Mode, group.Data),
		dataEntry("etc/passwd", passwd.Mode, passwd.Data),
		dirEntry(strings.TrimPrefix(nonrootHome, "/"), 0o700, nonrootUID),
	}, nil
}

func appendLine(data []byte, line string) []byte {
	if len(data) > 0 && data[len(data)-1] != '\n' {
		data = append(data, '\n')
	}
	return append(data, line...)
}

// hasID says whether a passwd or group file f has an entry whose field
// (0-based; 2 in both is the numeric id) is the nonroot id.
func hasID(f *baseFile, field int) bool {
	if f == nil {
		return false
	}
	want := fmt.Sprint(nonrootUID)
	s := bufio.NewScanner(bytes.NewReader(f.Data))
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) > field && fields[field] == want {
			return true
		}
	}
	return false
}

// baseFile is a regular file read from an image.
type baseFile struct {
	Mode int64
	Data []byte
}

// readFiles reads the named regular files (paths without a leading slash)
// from img's flattened file system; a missing one is absent from the map.
// A symbolic link is not followed.
func readFiles(img v1.Image, names ...string) (map[string]*baseFile, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]*baseFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the base's file system: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if !want[name] || hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(io.LimitReader(tr, 1<<20))
		if err != nil {
			return nil, err
		}
		files[name] = &baseFile{Mode: hdr.Mode & 0o7777, Data: data}
	}
}
