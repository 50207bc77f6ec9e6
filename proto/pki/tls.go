package pki

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// ServerTLS is the TLS of a server that serves one client, as runtimed's
// invoke server serves the apiserver: its serving pair, and the CA whose
// client certificates of CommonName clientCommonName it accepts. Both are
// read again whenever their files change, until ctx ends. It speaks gRPC's
// HTTP/2 only.
func ServerTLS(ctx context.Context, certFile, keyFile, clientCAFile, clientCommonName string) (*tls.Config, error) {
	return serverTLS(ctx, "runtimed-invoke", certFile, keyFile, clientCAFile, clientCommonName, []string{"h2"})
}

// MetricsServerTLS is ServerTLS for runtimed's /metrics: the same serving
// pair and CA, the scraper's CommonName, and HTTP/1.1 besides HTTP/2, as
// scrapers speak either (net/http serves both on a TLS listener).
func MetricsServerTLS(ctx context.Context, certFile, keyFile, clientCAFile, clientCommonName string) (*tls.Config, error) {
	return serverTLS(ctx, "runtimed-metrics", certFile, keyFile, clientCAFile, clientCommonName, []string{"h2", "http/1.1"})
}

func serverTLS(ctx context.Context, purpose, certFile, keyFile, clientCAFile, clientCommonName string, protos []string) (*tls.Config, error) {
	serving, err := dynamiccertificates.NewDynamicServingContentFromFiles(purpose+"-serving", certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load the %s serving certificate: %w", purpose, err)
	}
	clientCA, err := dynamiccertificates.NewDynamicCAContentFromFile(purpose+"-client-ca", clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("load the %s client CA: %w", purpose, err)
	}
	base := &tls.Config{
		MinVersion:            tls.VersionTLS13,
		ClientAuth:            tls.RequireAndVerifyClientCert,
		NextProtos:            protos,
		VerifyPeerCertificate: requireCommonName(clientCommonName),
	}
	controller := dynamiccertificates.NewDynamicServingCertificateController(base, clientCA, serving, nil, nil)
	serving.AddListener(controller)
	clientCA.AddListener(controller)
	if err := controller.RunOnce(); err != nil {
		return nil, fmt.Errorf("build the %s TLS configuration: %w", purpose, err)
	}
	go serving.Run(ctx, 1)
	go clientCA.Run(ctx, 1)
	go controller.Run(1, ctx.Done())
	return &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: protos, GetConfigForClient: controller.GetConfigForClient}, nil
}

// requireCommonName accepts only a verified client certificate of that
// CommonName: another certificate of the same CA (a runtimed's own) is not
// the client.
func requireCommonName(name string) func([][]byte, [][]*x509.Certificate) error {
	return func(_ [][]byte, chains [][]*x509.Certificate) error {
		if len(chains) == 0 || len(chains[0]) == 0 {
			return errors.New("no verified client certificate")
		}
		if cn := chains[0][0].Subject.CommonName; cn != name {
			return fmt.Errorf("client certificate %q is not %q", cn, name)
		}
		return nil
	}
}

// ClientTLS is the TLS the apiserver dials runtimed with: its client pair,
// and the CA that signs runtimed serving certificates. Both are read again
// whenever their files change, until ctx ends; a dial verifies the serving
// certificate against the CA as it is at that moment, for the ServerName of
// the dialed Pod's Runtime.
func ClientTLS(ctx context.Context, certFile, keyFile, caFile string) (*tls.Config, error) {
	pair, err := dynamiccertificates.NewDynamicServingContentFromFiles("runtimed-client", certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load the runtimed client certificate: %w", err)
	}
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("runtimed-ca", caFile)
	if err != nil {
		return nil, fmt.Errorf("load the runtimed CA: %w", err)
	}
	go pair.Run(ctx, 1)
	go ca.Run(ctx, 1)
	certs := &parsedPair{source: pair}
	roots := &parsedPool{source: ca}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return certs.get()
		},
		// The chain is verified below against the CA as it is now, which a
		// fixed RootCAs could not follow through a rotation.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("runtimed sent no certificate")
			}
			pool, err := roots.get()
			if err != nil {
				return err
			}
			intermediates := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				intermediates.AddCert(c)
			}
			_, err = cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots:         pool,
				Intermediates: intermediates,
				DNSName:       cs.ServerName,
				KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			return err
		},
	}, nil
}

// parsedPair parses a pair's current content once per change.
type parsedPair struct {
	source dynamiccertificates.CertKeyContentProvider
	mu     sync.Mutex
	cert   []byte
	parsed *tls.Certificate
}

func (p *parsedPair) get() (*tls.Certificate, error) {
	cert, key := p.source.CurrentCertKeyContent()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parsed != nil && bytes.Equal(cert, p.cert) {
		return p.parsed, nil
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("parse the client certificate %s: %w", p.source.Name(), err)
	}
	p.cert, p.parsed = cert, &pair
	return p.parsed, nil
}

// parsedPool parses a CA bundle's current content once per change.
type parsedPool struct {
	source dynamiccertificates.CAContentProvider
	mu     sync.Mutex
	bundle []byte
	pool   *x509.CertPool
}

func (p *parsedPool) get() (*x509.CertPool, error) {
	bundle := p.source.CurrentCABundleContent()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pool != nil && bytes.Equal(bundle, p.bundle) {
		return p.pool, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		return nil, fmt.Errorf("the CA bundle %s holds no certificate", p.source.Name())
	}
	p.bundle, p.pool = bundle, pool
	return pool, nil
}
