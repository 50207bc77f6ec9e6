package server_test

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzExtractTarStaysInTheWorkspace: whatever names and link targets an
// archive of three entries holds, extracting it (accepted or refused)
// writes nothing outside the sandbox's workspace, and leaves no symbolic
// link there that leads outside it from where it is.
func FuzzExtractTarStaysInTheWorkspace(f *testing.F) {
	f.Add(byte('2'), "l", ".", byte('2'), "l/x", "../../..", byte('0'), "l/f", "")
	f.Add(byte('2'), "sub", ".", byte('2'), "sub/l", "../../x", byte('0'), "ok", "")
	f.Add(byte('5'), "d", "", byte('2'), "d/l", "..", byte('0'), "d/l/f", "")
	f.Add(byte('1'), "h", "../../secret", byte('0'), "./a/../b", "", byte('2'), "c", "/etc")
	f.Fuzz(func(t *testing.T, t1 byte, n1, l1 string, t2 byte, n2, l2 string, t3 byte, n3, l3 string) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range []struct {
			typ        byte
			name, link string
		}{{t1, n1, l1}, {t2, n2, l2}, {t3, n3, l3}} {
			hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Format: tar.FormatPAX}
			var data []byte
			if e.typ == tar.TypeReg {
				data = []byte("x")
				hdr.Size = 1
			}
			if tw.WriteHeader(hdr) != nil {
				return // not an archive tar can write
			}
			_, _ = tw.Write(data)
		}
		if tw.Close() != nil {
			return
		}
		// A sandbox of its own each time (a Runtime Server and a worker):
		// slow for a fuzzer, and no run sees another's links.
		h, reg := newSandboxHarness(t)
		outside := t.TempDir()
		secret := filepath.Join(outside, "secret")
		if err := os.WriteFile(secret, []byte("s"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _ = h.extract(testContext(t), reg, "fuzz", buf.Bytes(), 4<<10)

		if b, err := os.ReadFile(secret); err != nil || string(b) != "s" {
			t.Fatalf("the file outside changed: %q, %v", b, err)
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 1 {
			t.Fatalf("something was written outside: %v", entries)
		}
		work := filepath.Clean(h.workDir)
		_ = filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			target, err := os.Readlink(p)
			if err != nil {
				return nil
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(filepath.Dir(p), target)
			}
			if target = filepath.Clean(target); target != work && !strings.HasPrefix(target, work+string(filepath.Separator)) {
				t.Fatalf("the archive left the link %s → %s, outside the workspace", p, target)
			}
			return nil
		})
	})
}
