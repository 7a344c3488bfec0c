"""vslice's long-running services, each started as ``vslice serve <name>``.

- ``extender``      the kube-scheduler extender (filter, prioritize, bind) over HTTP
- ``webhook``       the mutating admission webhook over HTTPS
- ``deviceplugin``  the kubelet device plugin over gRPC
- ``monitor``       the per-node metrics exporter

``settings`` holds the configuration base every service extends, ``httpserve`` the small HTTP
serving pieces they share (health, structured logs, clean shutdown on SIGTERM).
"""
