"""The node's GPUs: where they come from and how the node announces them.

- ``backends``              NVML on a GPU node, or a static inventory file (labs, tests)
- ``inventory_annotation``  the node's ``vslice.io/node-gpus`` annotation, kept current

A MIG manager (partitioning a GPU into instances before they are announced) belongs here.
"""
