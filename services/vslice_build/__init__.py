"""Building what vslice installs or runs, apart from running it.

- ``versions``  the one place that pins Kubernetes, etcd, containerd, kwok and the Go toolchain
- ``binaries``  finding or building those components from their Go modules (cached)
- ``images``    OCI image archives written without a registry (the smoke image, the pause image)
- ``workload``  the Python workload image (NVIDIA's bindings, gpustat, nvitop) from this environment
- ``bundle``    the offline bundle: Debian packages, wheels, binaries, images, checksums

The local lab (:mod:`vslice_lab`) and the bundle command use this; nothing here starts a
process that stays.
"""
