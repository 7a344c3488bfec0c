"""The control-plane part of vslice: what runs beside kube-apiserver and kube-scheduler.

- ``extender``  the kube-scheduler extender (``vslice serve scheduler``): filter, prioritize,
  bind over HTTPS; the usage ledger fed from the cluster, node locks, leadership, the
  caller's certificate check (``trust``) and the node gate
- ``webhook``   the mutating (and, on the DRA path, validating) admission webhook
  (``vslice serve webhook``): normalizes GPU requests, guards vslice's own annotations,
  converts pods to ResourceClaims in DRA namespaces
- ``quota``     the per-namespace GPU quota both of them enforce
- ``install``   what installs them: every Kubernetes object and the kube-scheduler and
  kube-apiserver files, pure functions of one values object; the lab, the Ansible role
  (through ``vslice manifests``) and a chart render from it, never from a copy

Nothing here imports :mod:`vslice_node`: the two sides meet only in the API server.
"""
