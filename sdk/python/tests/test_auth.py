"""Authentication comes from the kubeconfig through the Kubernetes client:
contexts pick cluster, user and namespace; an exec plugin's token is sent."""

from __future__ import annotations

import json
import pathlib
import sys

import kruntimes
from kruntimes.functions import Function
from test_no_resend import FakeAPIServer, ok


def test_an_exec_plugin_token_of_the_chosen_context_is_sent(tmp_path: pathlib.Path) -> None:
    server = FakeAPIServer(lambda h, n: ok(h))
    try:
        plugin = tmp_path / "plugin.py"
        plugin.write_text("import json\nprint(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1', "
                          "'kind': 'ExecCredential', 'status': {'token': 'from-exec-plugin'}}))\n")
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "other",
            "clusters": [{"name": "fake", "cluster": {"server": server.url}},
                         {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:1"}}],
            "users": [{"name": "exec", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
                "args": [str(plugin)], "interactiveMode": "Never"}}},
                {"name": "token", "user": {"token": "not-this-one"}}],
            "contexts": [{"name": "other", "context": {"cluster": "nowhere", "user": "token"}},
                         {"name": "agents", "context": {"cluster": "fake", "user": "exec", "namespace": "agents"}}],
        }))
        client = kruntimes.Client(kubeconfig=str(kubeconfig), context="agents")
        assert client.namespace == "agents"
        fn = Function(client, {"metadata": {"name": "fn", "namespace": client.namespace, "uid": "u"}})
        assert fn.invoke({}).output == "done"
        assert server.requests[0]["headers"]["authorization"] == "Bearer from-exec-plugin"
        assert kruntimes.Client(kubeconfig=str(kubeconfig), context="agents", namespace="mine").namespace == "mine"
    finally:
        server.close()
