"""The local lab: a real Kubernetes control plane on one machine, GPU nodes simulated by kwok
and real kubelet nodes on this machine whose GPUs a stand-in driver plays.

``vslice lab up|down|status|import-image`` and the end-to-end test fixtures run the same code.
Building what it runs (Kubernetes binaries, containerd, images) is :mod:`vslice_build`'s job.

- ``lab``         ``up``/``down``/``status``/``import_image`` themselves
- ``inventory``   the lab's nodes from an inventory file (DESIGN.md's CLUSTER format)
- ``cluster``     what the lab does through the API once it answers: vslice's install
  objects (``vslice_control.install``, with the lab's values), nodes
- ``dra``         the simulated nodes' ResourceSlices
- ``components``  the command line and health check of each control-plane component
- ``configs``     the files the lab writes: kubeconfigs, kube-scheduler's and kube-apiserver's
  configuration (from ``vslice_control.install``), settings
- ``realnode``    bringing a real kubelet node up and down; ``nodeconfig`` its containerd,
  kubelet and node-agent configuration; ``hostchanges`` what it changes on the host and
  undoing it
- ``pki``         the lab's CA and certificates; ``health`` probes; ``ports`` loopback ports
- ``processes``   starting and stopping processes by pid; ``state`` the record of a running
  lab; ``layout`` where everything lives in the state directory; ``errors`` the lab's error
"""
