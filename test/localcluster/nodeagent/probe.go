package nodeagent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
)

// runProbes drives the startup, readiness and liveness probes of one process
// run until ctx ends.
func (c *containerRunner) runProbes(ctx context.Context) {
	if c.spec.StartupProbe != nil {
		if !c.probeUntil(ctx, c.spec.StartupProbe, true, "startup") {
			if ctx.Err() == nil {
				c.kill("startup")
			}
			return
		}
		c.mu.Lock()
		c.started = true
		c.ready = c.spec.ReadinessProbe == nil
		c.mu.Unlock()
		c.pod.markStatusDirty()
	}
	if c.spec.LivenessProbe != nil {
		go func() {
			if !c.probeUntil(ctx, c.spec.LivenessProbe, false, "liveness") && ctx.Err() == nil {
				klog.FromContext(ctx).Info("Liveness probe failed; killing container", "container", c.spec.Name)
				c.kill("liveness")
			}
		}()
	}
	if c.spec.ReadinessProbe != nil {
		c.readinessLoop(ctx, c.spec.ReadinessProbe)
	}
}

// probeUntil runs probe every period. A startup probe (untilSuccess) returns
// true after successThreshold successes; a liveness probe returns false after
// failureThreshold failures. Either returns false when ctx ends.
func (c *containerRunner) probeUntil(ctx context.Context, probe *corev1.Probe, untilSuccess bool, kind string) bool {
	if !sleepCtx(ctx, time.Duration(probe.InitialDelaySeconds)*time.Second) {
		return false
	}
	successes, failures := 0, 0
	ticker := time.NewTicker(probePeriod(probe))
	defer ticker.Stop()
	for {
		err := c.probeOnce(ctx, probe)
		if err == nil {
			successes, failures = successes+1, 0
			if untilSuccess && successes >= int(max(probe.SuccessThreshold, 1)) {
				return true
			}
		} else {
			successes, failures = 0, failures+1
			klog.FromContext(ctx).V(3).Info("Probe failed", "container", c.spec.Name, "probe", kind, "err", err)
			if ctx.Err() == nil {
				c.pod.event(corev1.EventTypeWarning, "Unhealthy", "%s probe failed: %v", capitalize(kind), err)
			}
			if failures >= int(max(probe.FailureThreshold, 1)) {
				return false
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-ticker.C:
		}
	}
}

// readinessLoop keeps the container's Ready flag in line with its probe.
func (c *containerRunner) readinessLoop(ctx context.Context, probe *corev1.Probe) {
	if !sleepCtx(ctx, time.Duration(probe.InitialDelaySeconds)*time.Second) {
		return
	}
	successes, failures := 0, 0
	ticker := time.NewTicker(probePeriod(probe))
	defer ticker.Stop()
	for {
		err := c.probeOnce(ctx, probe)
		if err == nil {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
			if failures == int(max(probe.FailureThreshold, 1)) && ctx.Err() == nil {
				c.pod.event(corev1.EventTypeWarning, "Unhealthy", "Readiness probe failed: %v", err)
			}
		}
		c.mu.Lock()
		before := c.ready
		switch {
		case successes >= int(max(probe.SuccessThreshold, 1)):
			c.ready = true
		case failures >= int(max(probe.FailureThreshold, 1)):
			c.ready = false
		}
		changed := before != c.ready
		c.mu.Unlock()
		if changed {
			c.pod.markStatusDirty()
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (c *containerRunner) probeOnce(ctx context.Context, probe *corev1.Probe) error {
	timeout := time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c.pod.mu.Lock()
	podIP := c.pod.podIP
	c.pod.mu.Unlock()
	switch {
	case probe.HTTPGet != nil:
		h := probe.HTTPGet
		port, err := c.resolvePort(h.Port)
		if err != nil {
			return err
		}
		host := h.Host
		if host == "" {
			host = podIP
		}
		scheme := "http"
		if h.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, strconv.Itoa(port)), Path: h.Path}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return err
		}
		for _, hdr := range h.HTTPHeaders {
			req.Header.Add(hdr.Name, hdr.Value)
		}
		// Like the kubelet: HTTPS probes do not verify the certificate.
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("HTTP probe %s returned %d", u.String(), resp.StatusCode)
		}
		return nil
	case probe.TCPSocket != nil:
		port, err := c.resolvePort(probe.TCPSocket.Port)
		if err != nil {
			return err
		}
		host := probe.TCPSocket.Host
		if host == "" {
			host = podIP
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return err
		}
		return conn.Close()
	case probe.GRPC != nil:
		conn, err := grpc.NewClient(net.JoinHostPort(podIP, strconv.Itoa(int(probe.GRPC.Port))),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		service := ""
		if probe.GRPC.Service != nil {
			service = *probe.GRPC.Service
		}
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return err
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("gRPC health %s", resp.Status)
		}
		return nil
	case probe.Exec != nil:
		if len(probe.Exec.Command) == 0 {
			return fmt.Errorf("exec probe without a command")
		}
		cmd := exec.CommandContext(ctx, probe.Exec.Command[0], probe.Exec.Command[1:]...)
		cmd.Dir = c.pod.dir
		return cmd.Run()
	}
	return fmt.Errorf("probe has no handler")
}

// resolvePort turns a number or a named container port into a number.
func (c *containerRunner) resolvePort(port intstr.IntOrString) (int, error) {
	if port.Type == intstr.Int {
		return port.IntValue(), nil
	}
	for _, p := range c.spec.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %q has no port named %q", c.spec.Name, port.StrVal)
}

func probePeriod(p *corev1.Probe) time.Duration {
	return time.Duration(max(p.PeriodSeconds, 1)) * time.Second
}

// sleepCtx waits d and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
