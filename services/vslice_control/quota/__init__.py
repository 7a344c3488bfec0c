"""GPU quotas per namespace: the limits (``limits``, from ResourceQuota objects) and what counts
against them besides the extender's own ledger: allocated DRA claims (``claims``) and, for the
claims' allocation check, extender-path pods (``pods``). Both the extender and the webhook
stand on this package; it stands on neither."""
