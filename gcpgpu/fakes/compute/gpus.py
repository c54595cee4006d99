"""An instance's guestAccelerators checked as Compute checks them at insert.

GPUs attach to N1 machine types only (T4, V100, P100, P4 in this world); A2/A3/A4/G2 come with
theirs. What Compute answers, and from where:
- a GPU the zone does not offer: 400 badRequest "The resource 'projects/P/zones/Z/acceleratorTypes/G'
  was not found" (the words gcloud printed in fastai/course-v3#430; the 400 badRequest seen through
  Dataproc in hashicorp/terraform-provider-google#5860; the code for a direct instances.insert is
  unverified);
- a GPU on a machine that cannot take it (not N1, or an N1 with more vCPUs or memory than the GPU
  count allows): 400 badRequest "[GPU, MACHINE] features are not compatible for creating instance."
  (skypilot-org/skypilot#212 quotes it for nvidia-tesla-a100 on n1-highmem-8);
- a count the GPU does not come in (T4 x3): the wording is unverified, so the emulator uses the
  front end's usual invalid-value shape.
"""

from __future__ import annotations

from ..core import ApiError, invalid
from ..world import World
from .state import last


def attached_gpus(world: World, project: str, zone: str, mt: str, given: list, field: str, link) -> list[dict]:
    """The instance's stored guestAccelerators, or Compute's error for a combination it refuses."""
    info = world.machine_types[mt]
    accs = []
    for i, acc in enumerate(given):
        at = last(acc.get("acceleratorType"))
        count = int(acc.get("acceleratorCount", 1))
        if at not in world.accelerators_in_zone(zone):
            raise ApiError(400, "badRequest", f"The resource 'projects/{project}/zones/{zone}/acceleratorTypes/{at}' was not found")
        rules = world.attachable.get(at)
        if rules is not None:
            if count not in rules["limits"]:
                raise invalid(f"{field}.guestAccelerators[{i}].acceleratorCount", count,
                              f"Accelerator type '{at}' attaches in counts of {', '.join(map(str, rules['limits']))}.")
            cpus, gb = rules["limits"][count]
            if not mt.startswith("n1-") or info.vcpus > cpus or info.memory_mb > gb * 1024:
                raise _incompatible(at, mt)
        elif at != info.gpu or count != info.gpu_count:
            raise _incompatible(at, mt)  # an accelerator-optimized type's own GPUs, and only those
        accs.append({"acceleratorType": link(project, f"zones/{zone}/acceleratorTypes/{at}"), "acceleratorCount": count})
    if info.gpu and not accs:
        # A2/A3/A4/G2 come with their GPUs attached; the API reports them on the instance.
        accs = [{"acceleratorType": link(project, f"zones/{zone}/acceleratorTypes/{info.gpu}"),
                 "acceleratorCount": info.gpu_count}]
    return accs


def _incompatible(gpu: str, mt: str) -> ApiError:
    return ApiError(400, "badRequest", f"[{gpu}, {mt}] features are not compatible for creating instance.")
