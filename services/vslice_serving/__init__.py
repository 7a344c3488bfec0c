"""What every vslice service process shares, on the control plane and on the nodes.

- ``settings``   the configuration base every service extends (YAML file, then environment)
- ``httpserve``  the small HTTP serving pieces: health, version, metrics routes, structured
  logs, clean shutdown on SIGTERM

The services themselves live in :mod:`vslice_control` (extender, webhook) and
:mod:`vslice_node` (node agent, monitor); docs/architecture.md draws the map.
"""
