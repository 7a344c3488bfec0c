"""The operator's subcommands of ``vslice``, kept out of the data scientist's SDK package.

- ``serve``     ``vslice serve scheduler|webhook|device-plugin|monitor``: run one service
- ``lab``       ``vslice lab up|down|status|import-image``: the local lab
- ``bundle``    ``vslice bundle build|verify``: the offline bundle
- ``manifests`` ``vslice manifests``: the install objects the role and a chart apply

``vslice.cli`` stays the one ``vslice`` command and imports these by name only when one of
them runs, so ``import vslice`` and the data scientist's subcommands never load the lab, the
services or gRPC.
"""
