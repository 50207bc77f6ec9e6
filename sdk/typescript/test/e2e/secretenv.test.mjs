// Environment variables read from Secrets against the cluster: a Run refused
// a Secret its Runtime was not granted says what to grant; once granted, a
// function and a task see the value, which is never in the Run.
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import test from 'node:test';

import * as sdk from '../../dist/index.js';
import { cluster } from './cluster.mjs';

const DIGEST_HANDLER = `import hashlib, os

def handle(event, context):
    return {"token_sha256": hashlib.sha256(os.environ.get("TOKEN", "").encode()).hexdigest(), "plain": os.environ.get("PLAIN")}
`;

const DIGEST_TASK = `import hashlib, os

with open(os.environ["KRUNTIMES_OUTPUTS"], "a") as f:
    f.write("token_sha256=" + hashlib.sha256(os.environ.get("TOKEN", "").encode()).hexdigest() + "\\n")
`;

/** What the refusal's two kubectl commands create, then a wait until
 * kube-apiserver's authorizer says so. */
async function grant(c, secret) {
  const sa = `runtime-${c.python}`;
  const rbac = `/apis/rbac.authorization.k8s.io/v1/namespaces/${c.namespace}`;
  const call = (path, obj) => c.client.transport.call('POST', path, { obj });
  await call(`${rbac}/roles`, {
    apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'Role', metadata: { name: `${sa}:secrets` },
    rules: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get'], resourceNames: [secret] }],
  });
  await call(`${rbac}/rolebindings`, {
    apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'RoleBinding', metadata: { name: `${sa}:secrets` },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: `${sa}:secrets` },
    subjects: [{ kind: 'ServiceAccount', name: sa, namespace: c.namespace }],
  });
  const deadline = Date.now() + 30_000;
  for (;;) {
    const review = await call('/apis/authorization.k8s.io/v1/subjectaccessreviews', {
      apiVersion: 'authorization.k8s.io/v1', kind: 'SubjectAccessReview',
      spec: { user: `system:serviceaccount:${c.namespace}:${sa}`, resourceAttributes: { namespace: c.namespace, verb: 'get', resource: 'secrets', name: secret } },
    });
    if (review.status?.allowed) return;
    assert.ok(Date.now() < deadline, `${sa} may get Secret ${secret} within 30s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

test('a function and a task read a Secret once the Runtime is granted it', async (t) => {
  const c = cluster(t);
  if (!c) return;
  const secret = `ts-${randomUUID().slice(0, 8)}`;
  const value = `v-${randomUUID()}`;
  await c.client.transport.call('POST', `/api/v1/namespaces/${c.namespace}/secrets`, {
    obj: { apiVersion: 'v1', kind: 'Secret', metadata: { name: secret }, data: { token: Buffer.from(value).toString('base64') } },
  });
  const env = { PLAIN: 'p', TOKEN: { secretKeyRef: { name: secret, key: 'token' } } };

  const denied = await c.client.functions.create({ generateName: 'denied-', runtime: c.python, source: DIGEST_HANDLER, handler: 'main.handle', env });
  t.after(() => denied.delete());
  const err = await denied.waitReady({ timeoutMs: 90_000 }).then(() => assert.fail('became Ready'), (e) => e);
  assert.ok(err instanceof sdk.RunEnded, `${err}`);
  assert.equal(err.phase, 'Failed');
  assert.match(err.message, new RegExp(`create role runtime-${c.python}:secrets --verb=get --resource=secrets --resource-name=${secret}`));

  await grant(c, secret);
  const want = createHash('sha256').update(value).digest('hex');
  const fn = await c.client.functions.create({ generateName: 'granted-', runtime: c.python, source: DIGEST_HANDLER, handler: 'main.handle', env });
  t.after(() => fn.delete());
  assert.deepEqual(fn.run.spec.env[1], { name: 'TOKEN', valueFrom: { secretKeyRef: { name: secret, key: 'token' } } });
  await fn.waitReady({ timeoutMs: 90_000 });
  assert.deepEqual((await fn.invoke({})).output, { token_sha256: want, plain: 'p' });
  await fn.refresh();
  assert.ok(!JSON.stringify(fn.run).includes(value), 'the value is not in the Run');
  const result = await c.client.tasks.run(c.python, { script: DIGEST_TASK, env, waitTimeoutMs: 90_000 });
  assert.equal(result.phase, 'Succeeded', result.message);
  assert.deepEqual(result.outputs, { token_sha256: want });
});
