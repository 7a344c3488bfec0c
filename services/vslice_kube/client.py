"""Building a Kubernetes API client from a kubeconfig, in the documented lookup order.

Where the connection settings come from, first match wins:

1. an explicit kubeconfig path (a service's ``kubeconfig`` setting, a ``--kubeconfig`` flag);
2. the in-cluster service account (``$KUBERNETES_SERVICE_HOST`` plus the mounted token);
3. ``$KUBECONFIG`` (the first existing file of a ``:``-separated list);
4. ``~/.kube/config``.

Every client is independent: nothing here touches the ``kubernetes`` package's global
configuration, so one process can talk to two clusters (the lab's tests do).
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config
from vslice_core.errors import ClusterError

IN_CLUSTER_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")

__all__ = ["api_client", "kubeconfig_from_environment", "kubeconfig_path"]


def _in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and IN_CLUSTER_TOKEN.exists()


def kubeconfig_path(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The kubeconfig file to use, or None for the in-cluster service account.

    Raises ClusterError when nothing is configured at all, naming what was tried.
    """
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ClusterError(f"kubeconfig {str(path)!r} does not exist or is not a file")
        return path
    if _in_cluster():
        return None
    found = kubeconfig_from_environment()
    if found is not None:
        return found
    listed = os.environ.get("KUBECONFIG", "")
    env = f"$KUBECONFIG={listed!r} names no existing file" if listed else "$KUBECONFIG unset"
    raise ClusterError(
        "no Kubernetes connection configured: no kubeconfig given, not running in a cluster, "
        f"{env}, and ~/.kube/config absent "
        "(for the local lab: `vslice lab up` prints the export line)"
    )


def kubeconfig_from_environment() -> Path | None:
    """The first existing file of ``$KUBECONFIG``, else ``~/.kube/config`` if it exists."""
    for entry in os.environ.get("KUBECONFIG", "").split(os.pathsep):
        if entry and Path(entry).expanduser().is_file():
            return Path(entry).expanduser()
    default = Path.home() / ".kube" / "config"
    return default if default.is_file() else None


def api_client(
    kubeconfig: str | os.PathLike[str] | None = None, *, pool_size: int = 8
) -> client.ApiClient:
    """An ApiClient for the cluster found by the lookup order above.

    ``pool_size`` bounds concurrent connections (raise it when many threads share the client).
    """
    path = kubeconfig_path(kubeconfig)
    configuration = client.Configuration()
    if path is None:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(path), client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)
