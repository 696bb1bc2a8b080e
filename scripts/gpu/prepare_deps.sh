#!/usr/bin/env bash
# Downloads (here, with apt) the Debian packages zoff's build needs that a lent GPU machine
# lacks (it has torch, nvcc, CMake and ninja, but no apt and no network): Highway, liburing,
# CLI11, nlohmann-json, Gloo's headers, GoogleTest and pkg-config (zlib is there; Debian's
# static libz.a is not position independent and broke the Python module's link). They go to
# .gpu_deps/debs (ignored by git, ~2.5 MB) and travel with the tree (the device tool's
# `carry`); scripts/gpu/env.sh unpacks them there into a private prefix, never into /.
set -euo pipefail
cd "$(dirname "$0")/../.."
DEBS=(libhwy-dev libhwy1 liburing-dev liburing2 libcli11-dev nlohmann-json3-dev libgloo-dev
      libgtest-dev libgmock-dev pkgconf pkgconf-bin libpkgconf3)
mkdir -p .gpu_deps/debs
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# apt-get download writes into the working directory; as root it warns that _apt cannot
# write there (the download itself is fine).
(cd "$tmp" && apt-get download "${DEBS[@]}" 2>&1 | grep -v "unsandboxed" || true)
n="$(ls "$tmp"/*.deb | wc -l)"
[[ "$n" == "${#DEBS[@]}" ]] || { echo "prepare_deps: got $n of ${#DEBS[@]} packages" >&2; exit 1; }
rm -f .gpu_deps/debs/*.deb
mv "$tmp"/*.deb .gpu_deps/debs/
echo "prepare_deps: ${#DEBS[@]} packages in .gpu_deps/debs ($(du -sh .gpu_deps/debs | cut -f1))"
