#!/usr/bin/env bash
# Build the CSI node plugin's image with no container registry: the Debian 12 base is made from
# Debian's own packages (mmdebstrap), imported into podman, and the Dockerfile builds on it.
#
#   bash hdfsfuse/csi/kubernetes/build-image.sh [TAG]        (from the repository; as root)
#
# Needs mmdebstrap and podman (apt-get install mmdebstrap podman). The host's CA bundle is lent to
# the build's RUN steps, so a TLS-intercepting proxy the host trusts is trusted while packages
# download; the image keeps Debian's own bundle.
set -euo pipefail
cd "$(dirname "$0")/../../.."
tag="${1:-hdfsfuse-csi:0.1.0}"
base=localhost/debian:bookworm
if ! podman image exists "$base"; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  mmdebstrap --variant=minbase --include=ca-certificates bookworm "$work/debian.tar" http://deb.debian.org/debian
  podman import "$work/debian.tar" "$base"
fi
ca=()
[ -f /etc/ssl/certs/ca-certificates.crt ] && ca=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
# chroot isolation: RUN steps need no OCI runtime (some hosts refuse a runtime's cgroups or rlimits).
podman build --isolation=chroot --network=host "${ca[@]}" --build-arg "BASE=$base" \
  -f hdfsfuse/csi/kubernetes/Dockerfile -t "$tag" .
echo "built $tag" >&2
