"""The DRA (Dynamic Resource Allocation) kubelet plugin of driver ``gpu.vslice.io``.

Modules, by concept:

- ``claims``: the plain types the claim logic works with (``ClaimRef``, ``Prepared``,
  ``PreparedDevice``, ``ClaimError``) and the ``ClaimPreparer`` protocol it implements; no gRPC;
- ``servicer``: the kubelet's DRAPlugin v1 service, translating its messages to those types;
- ``registration``: the plugin-watcher Registration service (who we are, the kubelet's verdict);
- ``server``: both services on their unix sockets, started and stopped together;
- ``metrics``: the prepare/unprepare counters and the prepare latency (served by the agent);
- ``api``: the protocol definitions, ``dra.proto`` (package ``k8s.io.kubelet.pkg.apis.dra.v1``)
  and ``pluginregistration.proto`` (package ``pluginregistration``), written from the
  documented messages, and the Python code generated from them (committed). After editing a
  .proto, regenerate from the repository root with::

      .venv/bin/python -m grpc_tools.protoc -I services \\
          --python_out=services --pyi_out=services --grpc_python_out=services \\
          services/vslice_node/dra/api/dra.proto \\
          services/vslice_node/dra/api/pluginregistration.proto

  tests/services/test_dra_proto.py compares both files with the kubelet's own definitions.

The optional DRAResourceHealth service (package v1alpha1, a separate alpha API behind the
kubelet's ResourceHealthStatus feature gate) is not served: the kubelet does not need it to
prepare claims, and with the gate on it only retries its health stream and logs that quietly.
"""
