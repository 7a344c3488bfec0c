"""The node agent: one process per GPU node serving the device plugin and, with ``dra: true``,
the DRA driver, over the same GPUs and the same handover.

- ``settings``   the agent's settings file; ``groups`` its groups (handover, driver, CDI,
  device plugin, DRA driver), each handed to the part that uses it; ``flatkeys`` the names
  from before the groups, still accepted
- ``nodeagent``  everything assembled: backend, device board, handover, both front doors
- ``dranode``    the DRA front door's sockets, checkpoint and publisher, as the agent runs it
- ``metrics``    /metrics: the registration and GPU gauges beside the front doors' counters
- ``main``       the ``serve()`` entry point behind ``vslice serve device-plugin``
"""
