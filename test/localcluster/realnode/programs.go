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
	return buildProgram(ctx, dir, "hello", helloSource)
}

// WhoAmIPrefix starts the line the program of BuildWhoAmI prints: the user
// kube-apiserver authenticated it as.
const WhoAmIPrefix = "kube-apiserver says I am "

// whoAmISource asks kube-apiserver, as an in-cluster client does (the
// kubernetes Service's environment, the ServiceAccount's token and CA),
// who it is (a SelfSubjectReview), prints the answer and exits: 0 if it
// got one.
const whoAmISource = `package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"

func main() {
	if err := run(); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func run() error {
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	host := net.JoinHostPort(os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	body := []byte(` + "`" + `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}` + "`" + `)
	req, err := http.NewRequest(http.MethodPost, "https://"+host+"/apis/authentication.k8s.io/v1/selfsubjectreviews", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var review struct {
		Status struct {
			UserInfo struct {
				Username string ` + "`" + `json:"username"` + "`" + `
			} ` + "`" + `json:"userInfo"` + "`" + `
		} ` + "`" + `json:"status"` + "`" + `
	}
	if resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("%s from https://%s", resp.Status, host)
	}
	if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
		return err
	}
	fmt.Println("` + WhoAmIPrefix + `" + review.Status.UserInfo.Username)
	return nil
}
`

// BuildWhoAmI builds, into dir/whoami, a static program that asks
// kube-apiserver through the kubernetes Service, with its Pod's
// ServiceAccount token, who it is, prints WhoAmIPrefix and the user name,
// and exits 0.
func BuildWhoAmI(ctx context.Context, dir string) (string, error) {
	return buildProgram(ctx, dir, "whoami", whoAmISource)
}

// buildProgram builds the one-file main package source into dir/name.
func buildProgram(ctx context.Context, dir, name, source string) (string, error) {
	dir = filepath.Join(dir, name+"-src")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+name+"\n\ngo 1.22\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(source), 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(filepath.Dir(dir), name)
	return out, BuildStatic(ctx, dir, ".", out)
}
