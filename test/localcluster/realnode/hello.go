package realnode

import (
	"context"
	"os"
	"path/filepath"
)

// HelloGreeting is what the program of BuildHello prints, followed by its
// user ID.
const HelloGreeting = "hello from a real node, uid"

// helloSource prints HelloGreeting and its uid, then sleeps.
const helloSource = `package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	fmt.Println("` + HelloGreeting + `", os.Getuid())
	time.Sleep(time.Hour)
}
`

// BuildHello builds, into dir/hello, a static program that prints
// HelloGreeting and its uid and then sleeps: the container the real-node
// tests run.
func BuildHello(ctx context.Context, dir string) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(helloSource), 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(dir, "hello")
	return out, BuildStatic(ctx, dir, ".", out)
}
