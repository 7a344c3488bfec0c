"""The admission webhook: normalize GPU pods, deny unsafe or invalid ones, route them.

- ``review``       the AdmissionReview v1 wire format
- ``policy``       the decision for one pod (pure); the values themselves are read and checked
  once by the core (:func:`vslice_core.requests.normalize_gpu_pod`)
- ``podspec``      walking a pod's containers; ``podshape`` the types a review's pod must have;
  ``environment`` variables a container may not set; ``escapes`` what would take a GPU pod's
  containers around the shim (pure, refused whatever the namespace's Pod Security level)
- ``routing``      which path a namespace's GPU pods take; ``draconvert`` a pod on the DRA
  path becomes a ResourceClaimTemplate it references; ``claimpolicy`` claims users write
- ``reach``        which requests the API server sends here (rules, matchConditions), used by
  the install objects in :mod:`vslice_control.install`
- ``jsonpatch``    building the patch; ``metrics`` the answers counted and timed;
  ``main`` ``vslice serve webhook``
"""
