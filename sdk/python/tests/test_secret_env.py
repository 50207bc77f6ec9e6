"""Environment variables read from Secrets (env={"X": SecretKeyRef(...)}):
the spec the SDK writes, and against a real cluster a Run refused a Secret
its Runtime was not granted, then seeing the value once it is."""

from __future__ import annotations

import base64
import hashlib
import uuid
from typing import Any

import pytest

import kruntimes
from kruntimes.functions import env_list
from conftest import poll

DIGEST_HANDLER = '''import hashlib, os

def handle(event, context):
    return {"token_sha256": hashlib.sha256(os.environ.get("TOKEN", "").encode()).hexdigest(), "plain": os.environ.get("PLAIN")}
'''

DIGEST_TASK = '''import hashlib, os

with open(os.environ["KRUNTIMES_OUTPUTS"], "a") as f:
    f.write("token_sha256=" + hashlib.sha256(os.environ.get("TOKEN", "").encode()).hexdigest() + "\\n")
'''


def test_env_list_writes_values_and_secret_key_refs_in_order() -> None:
    assert env_list({"PLAIN": "p", "TOKEN": kruntimes.SecretKeyRef("db", "password"),
                     "MAYBE": kruntimes.SecretKeyRef("db", "other", optional=True), "N": 1}) == [
        {"name": "PLAIN", "value": "p"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
        {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "db", "key": "other", "optional": True}}},
        {"name": "N", "value": "1"},
    ]
    assert env_list(None) == []


def _create(client: kruntimes.Client, path: str, obj: dict[str, Any]) -> None:
    client._transport.call("POST", path, obj=obj)


def _grant(client: kruntimes.Client, runtime: str, secret: str) -> None:
    """What the refusal's two kubectl commands create: the Role
    runtime-<runtime>:secrets that may get the one Secret, bound to the
    Runtime's ServiceAccount; then waits until kube-apiserver's authorizer
    says so."""
    ns, sa = client.namespace, f"runtime-{runtime}"
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}"
    _create(client, f"{rbac}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": f"{sa}:secrets"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": [secret]}]})
    _create(client, f"{rbac}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": f"{sa}:secrets"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{sa}:secrets"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})

    def allowed() -> bool:
        review = client._transport.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", obj={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": f"system:serviceaccount:{ns}:{sa}",
                     "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "secrets", "name": secret}}})
        return bool((review.get("status") or {}).get("allowed"))

    poll(allowed, 30, f"{sa} may get Secret {secret}")


def test_a_function_and_a_task_read_a_granted_secret(client: kruntimes.Client, python_runtime: str) -> None:
    secret = f"sdk-{uuid.uuid4().hex[:8]}"
    value = f"v-{uuid.uuid4().hex}"
    _create(client, f"/api/v1/namespaces/{client.namespace}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret},
        "data": {"token": base64.b64encode(value.encode()).decode()}})
    env = {"PLAIN": "p", "TOKEN": kruntimes.SecretKeyRef(secret, "token")}

    # Not granted yet: the Run fails saying what to grant.
    with client.functions.create(generate_name="denied-", runtime=python_runtime, source=DIGEST_HANDLER,
                                 handler="main.handle", env=env) as fn:
        with pytest.raises(kruntimes.RunEnded) as e:
            fn.wait_ready(timeout=90)
        assert e.value.phase == "Failed"
        assert f"create role runtime-{python_runtime}:secrets --verb=get --resource=secrets --resource-name={secret}" in str(e.value)
        assert value not in str(fn.refresh().run)

    _grant(client, python_runtime, secret)
    want = hashlib.sha256(value.encode()).hexdigest()
    with client.functions.create(generate_name="granted-", runtime=python_runtime, source=DIGEST_HANDLER,
                                 handler="main.handle", env=env) as fn:
        assert fn.run["spec"]["env"][1] == {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}}}
        fn.wait_ready(timeout=90)
        assert fn.invoke({}).output == {"token_sha256": want, "plain": "p"}
        assert value not in str(fn.refresh().run)
    result = client.tasks.run(python_runtime, script=DIGEST_TASK, env=env, wait_timeout=90)
    assert result.succeeded, result
    assert result.outputs == {"token_sha256": want}
