"""Which staging modules the build wrapper pins, read from a kubernetes release's go.mod."""

from __future__ import annotations

from vslice_build import binaries

# Shaped like k8s.io/kubernetes' go.mod (1.36): requires of the same modules at v0.0.0 that
# must not count, a replace block, and a replace of a non-staging module that must not count
# either. The single-line form is what older releases and hand-edited go.mod files use.
GO_MOD = """\
module k8s.io/kubernetes

go 1.25.0

require (
\tgithub.com/google/go-cmp v0.7.0
\tk8s.io/api v0.0.0
\tk8s.io/streaming v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/cri-streaming => ./staging/src/k8s.io/cri-streaming
\tk8s.io/streaming => ./staging/src/k8s.io/streaming
\tk8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20250910181357-589584f1c912
)

replace k8s.io/client-go => ./staging/src/k8s.io/client-go
replace k8s.io/api => ./staging/src/k8s.io/api
replace github.com/example/fork => ../fork
"""


def test_staging_modules_come_from_both_replace_forms_once_each_and_sorted() -> None:
    assert binaries.staging_modules(GO_MOD) == [
        "api",
        "client-go",
        "cri-streaming",
        "streaming",
    ]


def test_a_go_mod_without_staging_replaces_names_none() -> None:
    assert binaries.staging_modules("module example.com/x\n\nrequire k8s.io/api v0.36.3\n") == []
