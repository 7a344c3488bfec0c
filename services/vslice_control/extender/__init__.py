"""The kube-scheduler extender: filter, prioritize and bind GPU pods against the ledger.

- ``protocol``    the extender wire format (kube-scheduler's ``extender/v1`` JSON)
- ``verbs``       the three verbs' decisions over the ledger
- ``feed``        node and pod watches -> the ledger (read with :mod:`vslice_core.clusterobjects`)
- ``holds``       slices reserved by this replica that no annotation shows yet
- ``trust``       state vslice did not write or cannot read: proofs, reports
- ``nodegate``    binds to one node serialized by that node's lock
- ``leadership``  with leader election, only the active replica binds
- ``metrics``     Prometheus series; ``main`` ``vslice serve scheduler``
"""
