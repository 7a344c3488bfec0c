"""The kube-scheduler extender: filter, prioritize and bind GPU pods against the ledger.

``protocol`` (wire format), ``verbs`` (the decisions), ``feed`` (watches -> ledger),
``metrics`` (Prometheus), ``main`` (``vslice serve scheduler``).
"""
