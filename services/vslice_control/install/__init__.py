"""vslice's install objects, from one source: every Kubernetes object an installation applies
and the configuration files of kube-scheduler and kube-apiserver that point them at vslice,
as pure functions of one typed parameter object (``values.InstallValues``).

- ``values``       the parameters (namespace, resource names, webhook address and CA, GPU
  namespaces, the DRA switch, kube-scheduler's and kube-apiserver's files) and their validation
- ``namespaces``   vslice's namespace and the tenants' GPU namespaces with Pod Security
- ``rbac``         service accounts with token Secrets, the services' ClusterRoles and bindings,
  the ``vslice-viewer`` ClusterRole for users
- ``statepolicy``  the ValidatingAdmissionPolicy that keeps vslice's pod state vslice's own
- ``claimreservation`` the ValidatingAdmissionPolicy that keeps a vslice ResourceClaim to one pod
- ``admission``    the pods' and the ResourceClaims' webhook configurations (around
  ``vslice_control.webhook.reach``)
- ``dra``          the DeviceClass ``gpu.vslice.io``
- ``scheduler``    the KubeSchedulerConfiguration with the vslice extender
- ``apiserver``    kube-apiserver's AdmissionConfiguration and the webhook client credentials
- ``manifests``    the parts in apply order, and their YAML text

Every consumer renders from here, never from a copy: the lab applies the objects through
``vslice_kube.installing`` and writes the files itself; the Ansible role runs ``vslice manifests
--values - --part NAME`` on the control plane host and writes what it prints; a chart would
take the same output as its templates' source (docs/install-objects.md).
"""
