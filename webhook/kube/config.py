"""Where the apiserver is and how to authenticate: a kubeconfig file or the pod's service account.

Parsing kubeconfig (contexts, exec plugins, inline certificate data) is delegated to the ``kubernetes`` package's
loader, which fills a ``kubernetes.client.Configuration``; this module turns that into what aiohttp needs: a base
URL, a verifying ``ssl.SSLContext`` and a way to get the current bearer token (which may rotate: projected
service-account tokens and exec credentials expire, so the token is asked for on every request, not cached here).
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Callable

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


@dataclass(frozen=True)
class ClusterConfig:
    """Everything the aiohttp client needs to reach one apiserver."""

    server: str  # https://host:port, no trailing slash
    ssl_context: ssl.SSLContext | bool  # False only when the kubeconfig says insecure-skip-tls-verify
    # Returns the Authorization header value (e.g. "Bearer ...") or None when client certificates authenticate.
    authorization: Callable[[], str | None]


def load_config(kubeconfig: str | None = None, context: str | None = None) -> ClusterConfig:
    """Load from ``kubeconfig`` (or $KUBECONFIG / ~/.kube/config), or in-cluster when none is given and we run in a pod.

    In-cluster wins only when no kubeconfig is named and the service-account token exists, mirroring
    controller-runtime's order (flag, then $KUBECONFIG, then in-cluster, then ~/.kube/config).
    """
    cfg = k8s_client.Configuration()
    if kubeconfig is None and not os.environ.get("KUBECONFIG") and os.path.exists(IN_CLUSTER_TOKEN):
        k8s_config.load_incluster_config(client_configuration=cfg)
    else:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    return config_from_client_configuration(cfg)


def config_from_client_configuration(cfg: k8s_client.Configuration) -> ClusterConfig:
    """Adapt an already-loaded ``kubernetes.client.Configuration`` (tests get one from the cluster fixture)."""
    ssl_context: ssl.SSLContext | bool
    if cfg.verify_ssl:
        ssl_context = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
        ssl_context.minimum_version = ssl.TLSVersion.TLSv1_2
        if cfg.cert_file:
            ssl_context.load_cert_chain(cfg.cert_file, cfg.key_file)
    else:
        ssl_context = False

    def authorization() -> str | None:
        # get_api_key_with_prefix runs the loader's refresh hook (token file re-read, exec plugin re-run).
        value = cfg.get_api_key_with_prefix("authorization")
        return value or None

    return ClusterConfig(server=cfg.host.rstrip("/"), ssl_context=ssl_context, authorization=authorization)
