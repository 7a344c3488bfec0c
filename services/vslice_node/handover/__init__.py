"""What a container is handed when it starts with a GPU slice, the same on both node paths.

- ``container``  the edits (env, mounts, device nodes) one container receives, and the limits
  text the shim enforces (pure)
- ``files``      writing the per-container limits file and region directory on the host: one
  function for the device plugin and the DRA driver
- ``edits``      the plain edit types; ``driver`` the driver's files; ``hostfiles`` the host's
  device nodes; ``cdispec`` and ``specfile`` the node's CDI spec and writing it
- ``cachedirs``  sweeping region directories of pods that are gone
- ``checkpoint`` the DRA path's record of prepared claims (also read by the monitor)
"""
