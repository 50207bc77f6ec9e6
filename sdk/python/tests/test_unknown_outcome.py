"""An invocation whose answer is lost on the way, against the real cluster.

A TCP proxy in front of kube-apiserver passes TLS through and, once armed,
closes the connection that carries the next bytes the server sends back:
the invocation reached the function and ran, and its answer never arrives —
what a client sees when a proxy on the way fails mid-answer. The ``record``
handler counts its executions.
"""

from __future__ import annotations

import pathlib
import socket
import threading
import urllib.parse

import pytest
import yaml

import kruntimes
from conftest import Counter, env


class CuttingProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.armed = threading.Event()
        self.cuts = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.listener.getsockname()[1]}"

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(conn, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, conn, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_server: bool) -> None:
        try:
            while data := src.recv(65536):
                if from_server and self._cut():
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _cut(self) -> bool:
        with self._lock:
            if not self.armed.is_set():
                return False
            self.armed.clear()
            self.cuts += 1
            return True


@pytest.fixture
def proxied(tmp_path: pathlib.Path, namespace: str):
    """A client whose kubeconfig names the proxy instead of kube-apiserver."""
    path = env("KRUNTIMES_TEST_KUBECONFIG")
    config = yaml.safe_load(pathlib.Path(path).read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    server = urllib.parse.urlsplit(cluster["server"])
    proxy = CuttingProxy((server.hostname, server.port))
    # kube-apiserver's serving certificate names 127.0.0.1, whatever the port.
    assert server.hostname == "127.0.0.1", cluster["server"]
    cluster["server"] = proxy.url
    for name in ("certificate-authority", "client-certificate", "client-key"):
        for entry in (cluster, *[u["user"] for u in config.get("users", [])]):
            if name in entry and not pathlib.Path(entry[name]).is_absolute():
                entry[name] = str(pathlib.Path(path).parent / entry[name])
    copy = tmp_path / "proxied.kubeconfig"
    copy.write_text(yaml.safe_dump(config))
    client = kruntimes.Client(namespace=namespace, kubeconfig=str(copy))
    yield client, proxy
    client.close()
    proxy.close()


def test_a_lost_answer_is_outcome_unknown_and_retry_unknown_gets_it_from_the_record(
        handlers: kruntimes.Function, counter: Counter, proxied) -> None:
    client, proxy = proxied
    # A GET first: the connection is open, so the next bytes back are an answer.
    fn = client.functions.get(handlers.name)
    proxy.armed.set()
    with pytest.raises(kruntimes.OutcomeUnknown) as e:
        fn.invoke({"file": str(counter.path)}, invocation_id="lost", retry=kruntimes.Retry())
    assert proxy.cuts == 1 and not e.value.not_run and not e.value.replayed
    assert counter.ids() == ["lost"], "it ran; only its answer was lost"

    again = fn.invoke({"file": str(counter.path)}, invocation_id="lost")
    assert again.output == "recorded" and again.invocation_id == "lost"
    assert counter.ids() == ["lost"], "the same ID again is answered from runtimed's record, not run twice"

    client.functions.get(handlers.name)
    proxy.armed.set()
    result = fn.invoke({"file": str(counter.path)}, invocation_id="lost-then-retried",
                       retry=kruntimes.Retry(unknown=True, deadline=30))
    assert proxy.cuts == 2, "the first attempt's answer was lost"
    assert result.output == "recorded" and result.invocation_id == "lost-then-retried"
    assert counter.ids() == ["lost", "lost-then-retried"], "Retry(unknown=True) sent it again; it ran once"
