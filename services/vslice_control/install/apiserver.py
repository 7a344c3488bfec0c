"""kube-apiserver's admission configuration (files on the control plane host): the webhook
admission plugins present a client certificate to vslice's webhook, so the webhook can refuse
every other caller (docs/webhook.md "Only the API server").

``admission.yaml`` is what ``--admission-control-config-file`` names; it points both plugins at
``admission-webhooks.kubeconfig``, whose one user carries the certificate and is named as the
API server looks credentials up: the webhook's host and port.
"""

from __future__ import annotations

from typing import Any

from vslice_control.install.admission import webhook_address
from vslice_control.install.values import InstallValues

CONFIG_FILE = "admission.yaml"
KUBECONFIG_FILE = "admission-webhooks.kubeconfig"
CLIENT_NAME = "kube-apiserver-webhook-client"
"""Common name of the API server's client certificate towards the webhook."""
APISERVER_CONFIG_API = "apiserver.config.k8s.io/v1"


def admission_configuration(values: InstallValues) -> dict[str, Any]:
    kubeconfig = f"{values.kube_apiserver.admission_config_dir}/{KUBECONFIG_FILE}"
    return {
        "apiVersion": APISERVER_CONFIG_API,
        "kind": "AdmissionConfiguration",
        "plugins": [
            {
                "name": plugin,
                "configuration": {
                    "apiVersion": APISERVER_CONFIG_API,
                    "kind": "WebhookAdmissionConfiguration",
                    "kubeConfigFile": kubeconfig,
                },
            }
            for plugin in ("MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")
        ],
    }


def webhook_credentials(values: InstallValues) -> dict[str, Any]:
    apiserver = values.kube_apiserver
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [
            {
                "name": webhook_address(values),
                "user": {
                    "client-certificate-data": apiserver.webhook_client_cert_data,
                    "client-key-data": apiserver.webhook_client_key_data,
                },
            }
        ],
    }
