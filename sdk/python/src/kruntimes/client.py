"""The synchronous client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator
from urllib.parse import quote

from ._transport import GROUP, VERSION, Transport, load_configuration
from .functions import Functions, watch_run
from .tasks import Tasks

if TYPE_CHECKING:
    from .sandbox import Sandbox


class Client:
    """A connection to kruntimes through the Kubernetes API.

    Authentication is the official Kubernetes client's: ``kubeconfig`` (else
    ``$KUBECONFIG``, else ``~/.kube/config``) with its ``context`` (else the
    current one) — client certificates, tokens and exec plugins included —
    or, when there is no kubeconfig and this runs in a Pod, the Pod's
    ServiceAccount token. ``namespace`` defaults to the context's (in a Pod:
    the ServiceAccount's), else ``default``.

    ``client.functions`` and ``client.tasks`` create and find Runs,
    ``client.sandbox()`` opens a sandbox. Used as a context manager, the
    client closes its connections at the end.
    """

    def __init__(self, namespace: str | None = None, kubeconfig: str | None = None,
                 context: str | None = None) -> None:
        configuration, context_namespace = load_configuration(kubeconfig, context)
        self.namespace: str = namespace or context_namespace
        self._transport = Transport(configuration)
        self.functions = Functions(self)
        self.tasks = Tasks(self)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the client's pooled connections."""
        self._transport.close()

    def sandbox(self, runtime: str = "python", **kwargs: Any) -> "Sandbox":
        """Opens a sandbox on ``runtime``: :meth:`kruntimes.Sandbox.create`
        with this client (same keyword arguments), Ready when returned."""
        from .sandbox import Sandbox

        return Sandbox.create(self, runtime, **kwargs)

    def runtime(self, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """The Runtime ``name`` as a dict (e.g. ``["spec"]["capacity"]["runs"]``)."""
        ns = quote(namespace or self.namespace, safe="")
        return self._transport.call("GET", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/runtimes/{quote(name, safe='')}")

    def _watch_run(self, namespace: str, name: str, timeout: float | None) -> Iterator[dict[str, Any]]:
        return watch_run(self, namespace, name, timeout)
