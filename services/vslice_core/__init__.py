"""vslice's pure core: domain model, request normalization, annotation codecs, placement.

Nothing in this package performs I/O or imports a Kubernetes, gRPC or HTTP library
(an import-linter contract in pyproject.toml enforces it), so the webhook, the extender,
the device plugin, the SDK and ``vslice plan`` all share one definition of what a GPU
request means and where it fits.
"""
