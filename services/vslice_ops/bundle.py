"""``vslice bundle build|verify``: the offline bundle a site without internet brings its hosts
up from (``roles``: set ``vslice_bundle`` to its directory; docs/bringup.md).

``build`` runs in a vslice source checkout on a host of the target's system (it builds the
wheel and the shim and fetches the target's packages with the host's own apt sources); it
prints progress on stderr and the bundle's path on stdout. ``verify`` checks every file of a
copy against the manifest. Exit status: 0, 1 when a build step fails, 2 on invalid input (an
unknown target, a bundle that does not match its manifest).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vslice.commands.options import fail


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vslice_build.bundle.manifest import TARGETS

    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser(
        "build", help="write an offline bundle", description="write an offline bundle"
    )
    build.set_defaults(usage_parser=build)
    build.add_argument(
        "--target",
        default="debian12",
        help=f"the hosts' system ({', '.join(sorted(TARGETS))}; default debian12)",
    )
    build.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the bundle's directory (default ./vslice-bundle-<version>-<target>)",
    )
    build.add_argument(
        "--tar", action="store_true", help="also write <out>.tar (one file to carry)"
    )
    build.add_argument(
        "--source", type=Path, default=None, help="the vslice checkout (default: this one)"
    )
    verify = actions.add_parser(
        "verify",
        help="check a bundle's files against its manifest",
        description="check a bundle's files against its manifest",
    )
    verify.set_defaults(usage_parser=verify)
    verify.add_argument("bundle", type=Path, help="the bundle's directory")
    verify.add_argument(
        "--arch",
        action="append",
        metavar="ARCH",
        help="the hosts' architecture (amd64/x86_64, arm64/aarch64; repeatable; default: "
        "this machine's), as the role checks every host's",
    )


def run(args: argparse.Namespace) -> int:
    from vslice_build.binaries import BinaryError
    from vslice_build.bundle import build, manifest, verify
    from vslice_core.errors import VsliceError

    try:
        if args.action == "verify":
            hosts = {f"--arch {arch}": arch for arch in args.arch} if args.arch else None
            checked = verify.verify(args.bundle, hosts)
            print(verify.summary(args.bundle, checked))
            return 0
        target = manifest.target(args.target)
        source = build.source_root(args.source)
        out = args.out or Path(f"vslice-bundle-{build.vslice_version(source)}-{target.name}")
        written = build.build(build.Options(target, out.absolute(), source, tarball=args.tar))
        print(written)
        return 0
    except VsliceError as error:
        return fail(f"bundle {args.action}", error)
    except BinaryError as error:
        print(f"vslice bundle {args.action}: {error}", file=sys.stderr)
        return 1
