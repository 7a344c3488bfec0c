"""``vslice request``: submit a sliced pod (or Job) from the shell and wait for it.

    vslice request --memory 10Gi --cores 30 python:3.12 python -c 'print(1)'

As with ``docker run``, options come before the image; everything after the image is the
command and its arguments.

The slice is checked before anything is created: a bad value or an unknown GPU type
exits 2 naming the field, a slice that cannot fit now exits 1 with the reasons per node.
``--local-queue NAME`` puts a Job in that Kueue LocalQueue of the namespace instead: it waits
there, suspended, until Kueue admits it under the team's quota, and each change of its place
or Kueue's reason is one line on stderr (docs/kueue.md).
``--queue`` means "queue it anyway": the pod is created all the same, and stderr says at once
why it does not fit now, with the numbers per node. When it could not fit even on an empty
cluster (more memory than any GPU here has, more GPUs than any node has), waiting for room
cannot help: it stays Pending until the cluster changes, so the command does not wait for it
(exit 1 unless ``--wait none``). While it waits, each new reason the pod does not progress is
one line on stderr (kube-scheduler's word and vslice's why-not, an image that cannot be
pulled, ...; see :mod:`vslice.progress`), and a pod that cannot progress without a change ends
the wait at once. On success it prints where the pod landed. Without ``--memory`` the pod
takes its GPU(s) whole and alone; a note on stderr says so.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from vslice_core.model import GPU_POLICIES, NODE_POLICIES

from vslice import progress
from vslice.commands.options import (
    EXIT_FAILED,
    EXIT_OK,
    add_connection_arguments,
    connect,
    fail,
)
from vslice.errors import VsliceError
from vslice.manifests import check_name
from vslice.plans import Plan
from vslice.slices import Slice
from vslice.workload import check_timeout

if TYPE_CHECKING:
    from vslice.client import Client

WAIT_CHOICES = ("scheduled", "running", "completed", "none")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument("image", help="container image")
    # dest "argv": the dispatcher keeps the subcommand's name in args.command
    parser.add_argument(
        "argv", metavar="COMMAND", nargs=argparse.REMAINDER, help="command and its arguments"
    )
    slice_group = parser.add_argument_group("slice")
    slice_group.add_argument("--memory", help="per GPU: '10Gi', MiB, or '30%%'")
    slice_group.add_argument("--cores", type=int, help="per GPU: percent of the SMs, 0..100")
    slice_group.add_argument("--gpus", type=int, default=1, help="number of GPUs (default 1)")
    slice_group.add_argument("--gpu-type", help="comma list: model substrings to use")
    slice_group.add_argument("--exclude-gpu-type", help="comma list: model substrings to avoid")
    slice_group.add_argument("--gpu-uuid", help="comma list: exact GPU UUIDs to use")
    slice_group.add_argument("--exclude-gpu-uuid", help="comma list: GPU UUIDs to avoid")
    slice_group.add_argument("--node-policy", help=f"one of {', '.join(NODE_POLICIES)}")
    slice_group.add_argument("--gpu-policy", help=f"one of {', '.join(GPU_POLICIES)}")
    slice_group.add_argument("--numa-bind", action="store_true", help="GPUs on one NUMA node")
    slice_group.add_argument(
        "--priority-class",
        help="the pod's PriorityClass: a higher one may preempt lower-priority slices",
    )
    parser.add_argument("--name", help="pod or Job name (default: generated)")
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig's)")
    parser.add_argument("--job", action="store_true", help="create a Job instead of a Pod")
    waiting = parser.add_mutually_exclusive_group()
    waiting.add_argument(
        "--queue", action="store_true", help="create it even if it fits nowhere now"
    )
    waiting.add_argument(
        "--local-queue",
        metavar="NAME",
        help="wait in this Kueue LocalQueue of the namespace: a Job is created suspended and "
        "starts when Kueue admits it (docs/kueue.md)",
    )
    parser.add_argument(
        "--wait", choices=WAIT_CHOICES, default="running", help="what to wait for (default running)"
    )
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait (120)")
    parser.add_argument("--logs", action="store_true", help="print the logs after waiting")
    parser.add_argument("--dry-run", action="store_true", help="only print the plan")


def _slice(args: argparse.Namespace) -> Slice:
    memory: str | int | None = args.memory
    if isinstance(memory, str) and memory.isdigit():
        memory = int(memory)
    return Slice(
        memory,
        cores=args.cores,
        gpus=args.gpus,
        gpu_type=args.gpu_type,
        exclude_gpu_type=args.exclude_gpu_type,
        gpu_uuid=args.gpu_uuid,
        exclude_gpu_uuid=args.exclude_gpu_uuid,
        node_policy=args.node_policy,
        gpu_policy=args.gpu_policy,
        numa_bind=args.numa_bind,
        priority_class=args.priority_class,
    )


def whole_gpu_note(wanted: Slice) -> str | None:
    """What stderr says when no ``--memory`` is given: the pod gets whole GPUs (alone when no
    ``--cores`` is given either, the design's exclusive rule)."""
    if wanted.memory_mib is not None or wanted.memory_percent is not None:
        return None
    one = wanted.gpus == 1
    if wanted.exclusive:
        gets = "1 whole GPU exclusively" if one else f"{wanted.gpus} whole GPUs exclusively"
    else:
        gets = "all the memory of " + ("1 GPU" if one else f"each of {wanted.gpus} GPUs")
    return (
        f"vslice request: no --memory given: the pod gets {gets}; "
        "give --memory 10Gi (or 30%) for a slice"
    )


def queued_note(plan: Plan, ever: bool, how: str = "--queue") -> str:
    """What stderr says at once when ``--queue`` (or ``--local-queue``) creates a pod that
    does not fit now."""
    why = plan.why_not()
    if ever:
        return (
            f"vslice request: it does not fit now; queued anyway ({how}): it waits until "
            f"other pods give room back\n{why}"
        )
    return (
        "vslice request: it can never fit the GPUs this cluster has, even with every GPU "
        f"free; queued anyway ({how}): it stays Pending until the cluster changes\n{why}"
    )


def _queue_check(client: Client, wanted: Slice, how: str = "--queue") -> bool:
    """Say at once why a queued slice does not fit now; False when it never could."""
    snapshot = client.snapshot()
    plan = client.plan(wanted, snapshot=snapshot)
    if plan.fits:
        return True
    ever = client.plan(wanted, snapshot=progress.emptied(snapshot)).fits
    print(queued_note(plan, ever, how), file=sys.stderr, flush=True)
    return ever


def _report(line: str) -> None:
    print(f"vslice request: waiting: {line}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    try:
        wanted = _slice(args)
        check_timeout(args.timeout)  # refused before anything is created
        if args.name is not None:
            check_name(args.name)
        note = whole_gpu_note(wanted)
        if note:
            print(note, file=sys.stderr, flush=True)
        with connect(args, args.namespace) as client:
            if args.dry_run:
                plan = client.plan(wanted)
                print(plan)
                return EXIT_OK if plan.fits else EXIT_FAILED
            queue: bool | str = args.queue
            if args.local_queue is not None:
                queue = args.local_queue
            how = "--queue" if args.queue else f"--local-queue {args.local_queue}"
            can_fit = _queue_check(client, wanted, how) if queue is not False else True
            workload = client.run(
                args.image,
                command or None,
                slice=wanted,
                name=args.name,
                kind="Job" if args.job or args.local_queue is not None else "Pod",
                queue=queue,
            )
            print(f"created {workload.kind.lower()} {workload.namespace}/{workload.name}")
            if args.wait != "none" and not can_fit:
                where = f"{workload.name} -n {workload.namespace}"
                print(
                    f"vslice request: not waiting for it to be {args.wait}: it cannot be "
                    f"placed on these GPUs; `vslice why {where}` follows it, "
                    f"`vslice delete {where}` removes it",
                    file=sys.stderr,
                    flush=True,
                )
                return EXIT_FAILED
            if args.wait != "none":
                workload.wait(args.timeout, until=args.wait, report=_report)
                print(workload.allocation or "not placed yet")
            if args.logs:
                sys.stdout.write(workload.logs())
    except VsliceError as exc:
        return fail("request", exc)
    return EXIT_OK
