"""The local lab: a real Kubernetes control plane on one machine with simulated GPU nodes.

``vslice lab up|down|status`` and the end-to-end test fixtures run the same code:

- ``binaries``   finds or builds etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kwok
- ``pki``        the lab's certificate authority, serving and client certificates
- ``ports``      free loopback ports
- ``processes``  starting, watching and stopping the component processes (by pid)
- ``components`` the command line and health check of each component
- ``state``      the state directory (pids, ports, logs, kubeconfig) and its JSON record
- ``lab``        ``up``/``down``/``status`` themselves
"""
