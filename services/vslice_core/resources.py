"""The extended-resource names a pod uses to ask for GPU slices.

They are configurable (a cluster migrating from another sharing system may use other names);
the defaults are HAMi's, so manifests written for HAMi work unchanged.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ResourceNames(BaseModel):
    """Names of the container resources vslice reads and the webhook writes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str = Field("nvidia.com/gpu", description="number of GPUs")
    memory: str = Field("nvidia.com/gpumem", description="MiB (or a quantity) per GPU")
    memory_percent: str = Field(
        "nvidia.com/gpumem-percentage", description="percent of each GPU's memory"
    )
    cores: str = Field("nvidia.com/gpucores", description="percent of SMs per GPU")
    priority: str = Field("nvidia.com/priority", description="scheduling priority hint")

    def managed(self) -> tuple[str, ...]:
        """The names that make a container a GPU container."""
        return (self.gpu, self.memory, self.memory_percent, self.cores)


DEFAULT_RESOURCE_NAMES = ResourceNames()
