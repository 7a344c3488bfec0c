"""The mutating admission webhook: normalize GPU pods, deny unsafe or invalid ones, route them.

``review`` (AdmissionReview wire format), ``policy`` (the decision), ``jsonpatch`` (patch
building), ``main`` (``vslice serve webhook``).
"""
