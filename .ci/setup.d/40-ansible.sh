# Ansible bring-up tests: podman (runc) for the molecule scenarios, debootstrap for their image,
# and the collections pinned in roles/requirements.yml (plus tests/ansible/requirements.yml). Sourced by .ci/setup.
#
# Galaxy is not reachable from CI, so the collections are taken out of the `ansible` community
# package on PyPI, whose release below bundles exactly the pinned versions (checked on extract).
ansible_bundle="ansible==12.3.0"
ansible_packages=(podman runc debootstrap fuse-overlayfs slirp4netns uidmap)
missing=()
for p in "${ansible_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi

# podman must use runc and explicit ulimits on these hosts; add the keys only when absent so a
# site's own containers.conf is left alone.
containers_conf=/etc/containers/containers.conf
if ! grep -qs '^[[:space:]]*default_ulimits' "$containers_conf" \
   || ! grep -qs '^[[:space:]]*runtime[[:space:]]*=' "$containers_conf"; then
  $SUDO mkdir -p /etc/containers
  if [ ! -s "$containers_conf" ]; then
    printf '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n\n[engine]\nruntime = "runc"\n' \
      | $SUDO tee "$containers_conf" >/dev/null
  else
    echo "40-ansible: $containers_conf lacks default_ulimits or runtime; add them:" >&2
    echo '  [containers] default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]; [engine] runtime = "runc"' >&2
  fi
fi

.venv/bin/python - "$ansible_bundle" <<'PY'
"""Extract the pinned collections from the `ansible` wheel into ~/.ansible/collections."""
import json, pathlib, subprocess, sys, zipfile, yaml

bundle = sys.argv[1]
cache = pathlib.Path.home() / ".cache/vslice/ansible"
target = pathlib.Path.home() / ".ansible/collections/ansible_collections"
wanted = [c for f in ("roles/requirements.yml", "tests/ansible/requirements.yml")
          for c in yaml.safe_load(pathlib.Path(f).read_text())["collections"]]

def installed(ns, name):
    manifest = target / ns / name / "MANIFEST.json"
    if not manifest.exists():
        return None
    return json.loads(manifest.read_text())["collection_info"]["version"]

todo = [c for c in wanted if installed(*c["name"].split(".")) != c["version"]]
if not todo:
    sys.exit(0)
cache.mkdir(parents=True, exist_ok=True)
wheels = sorted(cache.glob(bundle.replace("==", "-") + "-*.whl"))
if not wheels:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache), bundle], check=True)
    wheels = sorted(cache.glob(bundle.replace("==", "-") + "-*.whl"))
with zipfile.ZipFile(wheels[-1]) as wheel:
    for c in todo:
        ns, name = c["name"].split(".")
        prefix = f"ansible_collections/{ns}/{name}/"
        info = json.loads(wheel.read(prefix + "MANIFEST.json"))["collection_info"]
        if info["version"] != c["version"]:
            sys.exit(f"40-ansible: {bundle} bundles {c['name']} {info['version']}, "
                     f"the requirements pin {c['version']}")
        for member in wheel.namelist():
            if member.startswith(prefix):
                wheel.extract(member, target.parent)
        print(f"40-ansible: installed {c['name']} {c['version']}")
PY
