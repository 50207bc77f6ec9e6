"""HTTP to the Kubernetes API with the official client's configuration.

The kubernetes package loads the kubeconfig (contexts, exec plugins, client
certificates) or the in-cluster ServiceAccount token into a Configuration;
its ApiClient owns a urllib3 PoolManager with that TLS setup. Every request
here goes through that pool with ``retries=False``: urllib3 neither retries
nor follows redirects, so an invocation is sent at most once per call.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Iterator
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from . import errors

GROUP = "kruntimes.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

# What urllib3 raises when it could not connect: nothing was sent.
_NOT_SENT = (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError)


def load_configuration(kubeconfig: str | None, context: str | None) -> tuple[k8s_client.Configuration, str]:
    """Returns the client configuration and the namespace of the context:
    the kubeconfig (``kubeconfig``, else $KUBECONFIG, else ~/.kube/config),
    or, when there is none and this runs in a Pod, its ServiceAccount."""
    configuration = k8s_client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    in_cluster = not kubeconfig and not os.environ.get("KUBECONFIG") and not os.path.exists(path) \
        and os.environ.get("KUBERNETES_SERVICE_HOST")
    if in_cluster:
        k8s_config.load_incluster_config(client_configuration=configuration)
        namespace = "default"
        try:
            with open(_SA_NAMESPACE) as f:
                namespace = f.read().strip() or "default"
        except OSError:
            pass
        return configuration, namespace
    k8s_config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    contexts, active = k8s_config.list_kube_config_contexts(config_file=path)
    chosen = next((c for c in contexts if c["name"] == context), None) if context else active
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return configuration, namespace


class Response:
    """One answer: status code, headers and (unless streamed) body."""

    def __init__(self, raw: urllib3.response.HTTPResponse, body: bytes | None) -> None:
        self.raw = raw
        self.code = raw.status
        self.headers = raw.headers
        self.body = body if body is not None else b""

    def json(self) -> Any:
        return json.loads(self.body)

    def status(self) -> dict[str, Any] | None:
        """The metav1.Status of an error answer, or None when the body is none
        (a proxy's plain text)."""
        try:
            st = json.loads(self.body)
        except ValueError:
            return None
        return st if isinstance(st, dict) and st.get("kind") == "Status" else None


class Transport:
    """Sends requests to the API server with the caller's credentials."""

    def __init__(self, configuration: k8s_client.Configuration) -> None:
        # No urllib3 retries anywhere, not only for invoke.
        configuration.retries = False
        self.configuration = configuration
        self.api_client = k8s_client.ApiClient(configuration)
        self.pool: urllib3.PoolManager = self.api_client.rest_client.pool_manager
        self.host = configuration.host.rstrip("/")

    def close(self) -> None:
        self.pool.clear()

    def _headers(self, extra: dict[str, str] | None) -> dict[str, str]:
        headers: dict[str, str] = {"Accept": "application/json", "User-Agent": "kruntimes-python/0.1.0"}
        # Calls the exec plugin / token refresh hook when the token expired.
        self.api_client.update_params_for_auth(headers, [], ["BearerToken"])
        if self.configuration.username or self.configuration.password:
            headers["Authorization"] = self.configuration.get_basic_auth_token()
        headers.update(extra or {})
        return headers

    def send(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: bytes | Iterable[bytes] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | urllib3.Timeout | None = None,
        stream: bool = False,
    ) -> Response:
        """Sends one request, once. A body that is an iterable of bytes is
        sent as it is produced (``Transfer-Encoding: chunked``). Transport
        failures are raised as urllib3's exceptions; callers map them (see
        :func:`not_sent`)."""
        url = self.host + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        raw = self.pool.request(
            method,
            url,
            body=body,
            headers=self._headers(headers),
            retries=False,
            redirect=False,
            timeout=timeout if timeout is not None else urllib3.Timeout(connect=30, read=60),
            preload_content=not stream,
            chunked=body is not None and not isinstance(body, (bytes, bytearray)),
        )
        return Response(raw, None if stream else raw.data)

    def call(self, method: str, path: str, *, run: str | None = None, obj: Any = None,
             content_type: str = "application/json", **kw: Any) -> Any:
        """A JSON API call: returns the decoded answer or raises the error."""
        body = None
        headers = {}
        if obj is not None:
            body = json.dumps(obj).encode()
            headers["Content-Type"] = content_type
        try:
            resp = self.send(method, path, body=body, headers=headers, **kw)
        except _NOT_SENT as e:
            raise errors.ConnectFailed(f"cannot connect to {self.host}: {e}", run=run) from e
        except urllib3.exceptions.HTTPError as e:
            err = errors.KruntimesError(f"{method} {path}: {e}", run=run)
            err.not_run = False
            raise err from e
        if resp.code >= 300:
            raise errors.error_for(resp.code, resp.headers, resp.status(), run=run)
        return resp.json() if resp.body else None

    def watch(self, path: str, query: dict[str, Any], timeout: float | None) -> Iterator[dict[str, Any]]:
        """Yields the events of a watch until the server ends it."""
        query = dict(query, watch="true")
        if timeout is not None:
            query["timeoutSeconds"] = max(1, int(timeout + 0.999))
        read = (timeout + 10) if timeout is not None else None
        try:
            resp = self.send("GET", path, query=query, stream=True, timeout=urllib3.Timeout(connect=30, read=read))
        except _NOT_SENT as e:
            raise errors.ConnectFailed(f"cannot connect to {self.host}: {e}") from e
        try:
            if resp.code >= 300:
                resp.body = resp.raw.read()
                raise errors.error_for(resp.code, resp.headers, resp.status())
            buffer = b""
            for chunk in resp.raw.stream(4096, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            # A watch stopped early has unread data: never hand its
            # connection to another request.
            resp.raw.close()
            resp.raw.release_conn()


def not_sent(exc: BaseException) -> bool:
    """Whether a transport failure happened before anything was sent."""
    return isinstance(exc, _NOT_SENT)


def runs_path(namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace, safe='')}/runs"
    if name:
        path += "/" + quote(name, safe="")
    if subresource:
        path += "/" + subresource
    return path
