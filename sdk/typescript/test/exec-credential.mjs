// An exec credential plugin for the auth test: prints an ExecCredential.
process.stdout.write(
  JSON.stringify({
    apiVersion: 'client.authentication.k8s.io/v1',
    kind: 'ExecCredential',
    status: { token: 'token-from-exec-plugin', expirationTimestamp: new Date(Date.now() + 3600_000).toISOString() },
  }),
);
