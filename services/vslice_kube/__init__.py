"""The one adapter that talks to the Kubernetes API (the ``kubernetes`` client).

Everything else in vslice receives plain dicts or core models from here and never imports
the client itself; an import-linter contract in pyproject.toml enforces it. API failures
are re-raised as ``vslice_core.errors.ClusterError`` with the parsed Status kept.
"""
