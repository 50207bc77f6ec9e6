package runtime

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kruntimes.io/kruntimes/apis/invocation"
	"kruntimes.io/kruntimes/apis/kruntimes/v1alpha1"
	"kruntimes.io/kruntimes/apis/runtimepod"
	"kruntimes.io/kruntimes/proto/pki"
)

// RuntimedTLS is how the Pods of a Runtime get the invoke hop's TLS: a
// Secret runtimepod.RuntimedTLSSecretName per Runtime, mounted into runtimed.
type RuntimedTLS struct {
	// Issuer, when set, makes this controller issue and renew each
	// Runtime's Secret from the kruntimes CA. Without it the Secrets are
	// someone else's to provide (cert-manager, an operator).
	Issuer *pki.CA
}

// Validity of a runtimed serving certificate, and when it is renewed.
const (
	servingValidity = 30 * 24 * time.Hour
	renewBefore     = 10 * 24 * time.Hour
)

// Option configures a Controller.
type Option func(*Controller)

// WithRuntimedTLS gives the Runtime Pods the invoke hop's TLS, so that
// their functions can be invoked.
func WithRuntimedTLS(t RuntimedTLS) Option {
	return func(c *Controller) { c.runtimedTLS = &t }
}

// KruntimesAPI is kruntimes-apiserver's own Service as runtimed reaches it
// directly, past kube-apiserver's aggregation proxy: Server is its
// https://host[:port], CA the PEM bundle that verifies it.
type KruntimesAPI struct {
	Server string
	CA     []byte
}

// WithKruntimesAPI makes runtimed reach the kruntimes.io API at api instead
// of through the Kubernetes API.
func WithKruntimesAPI(api KruntimesAPI) Option {
	return func(c *Controller) { c.kruntimesAPI = &api }
}

// syncTLSSecret issues the serving pair of rt's runtimed when the Secret is
// missing, was made by another CA, or nears its expiry. It reads the Secret
// by name: the controller may get, create and update Secrets, but watches
// none, so it never holds the cluster's Secrets in memory.
func (c *Controller) syncTLSSecret(ctx context.Context, rt *v1alpha1.Runtime) error {
	if c.runtimedTLS == nil || c.runtimedTLS.Issuer == nil {
		return nil
	}
	name := runtimepod.RuntimedTLSSecretName(rt.Name)
	secrets := c.kubeClient.CoreV1().Secrets(rt.Namespace)
	existing, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		want, err := c.newTLSSecret(rt)
		if err != nil {
			return err
		}
		_, err = create(ctx, c, rt, "Secret", want, secrets)
		return err
	case err != nil:
		return err
	}
	if err := checkOwned(rt, "Secret", existing); err != nil {
		return err
	}
	if !c.needsReissue(rt, existing) {
		return nil
	}
	want, err := c.newTLSSecret(rt)
	if err != nil {
		return err
	}
	update := existing.DeepCopy()
	update.Type, update.Data = want.Type, want.Data
	_, err = secrets.Update(ctx, update, metav1.UpdateOptions{})
	return c.updated(ctx, rt, "Secret", name, err)
}

func (c *Controller) newTLSSecret(rt *v1alpha1.Runtime) (*corev1.Secret, error) {
	ca := c.runtimedTLS.Issuer
	cert, key, err := ca.IssueServing(rt.Namespace, rt.Name, servingValidity)
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: ownedMeta(rt, runtimepod.RuntimedTLSSecretName(rt.Name)),
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       cert,
			corev1.TLSPrivateKeyKey: key,
			"ca.crt":                ca.CertPEM,
		},
	}, nil
}

// needsReissue reports whether the Secret's pair is not one this CA would
// issue for rt now.
func (c *Controller) needsReissue(rt *v1alpha1.Runtime, s *corev1.Secret) bool {
	if !bytes.Equal(s.Data["ca.crt"], c.runtimedTLS.Issuer.CertPEM) {
		return true
	}
	block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if block == nil {
		return true
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || cert.CheckSignatureFrom(c.runtimedTLS.Issuer.Cert) != nil {
		return true
	}
	return !slices.Contains(cert.DNSNames, invocation.ServerName(rt.Namespace, rt.Name)) ||
		!slices.Contains(cert.DNSNames, invocation.MetricsServerName) || c.clock.Now().Add(renewBefore).After(cert.NotAfter)
}
