#!/usr/bin/env bash
# Installs the peers scripts/bench_peers.sh compares zoff with (DeepSpeed; FSDP2 and DDP come
# with torch), pinned in scripts/peers/requirements.txt, into a venv of their own layered on
# zoff's (a .pth file puts zoff's site-packages, with its torch, on the path: no second
# 5.4 GB torch), plus Debian's libaio-dev, which DeepSpeed's NVMe swapping (async_io) needs.
# Not part of zoff's setup: nothing of zoff depends on these.
#   ZOFF_PEERS_VENV  the venv (default: beside zoff's, venv-peers)
set -euo pipefail
cd "$(dirname "$0")/.."
# zoff's own setup, with Debian's libaio-dev added to its package list.
ZOFF_EXTRA_PACKAGES=libaio-dev bash scripts/setup.sh
source scripts/env.sh
PEERS_VENV="${ZOFF_PEERS_VENV:-$ZOFF_CACHE_ROOT/venv-peers}"

want="$(cat python/requirements.txt scripts/peers/requirements.txt | sha256sum | cut -d' ' -f1)"
stamp="$PEERS_VENV/.zoff-peers-requirements.sha256"
if [[ -x "$PEERS_VENV/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "setup_peers: venv $PEERS_VENV up to date"
  exit 0
fi
[[ -x "$PEERS_VENV/bin/python" ]] || "$ZOFF_BASE_PYTHON" -m venv "$PEERS_VENV"
site="$("$PEERS_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$ZOFF_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/zoff-venv.pth"
pip=("$PEERS_VENV/bin/pip" install --no-cache-dir -q --disable-pip-version-check)
# setuptools and wheel first: DeepSpeed's sdist builds with them, without build isolation.
"${pip[@]}" "$(grep '^setuptools==' scripts/peers/requirements.txt)" \
  "$(grep '^wheel==' scripts/peers/requirements.txt)"
"${pip[@]}" --no-build-isolation -r scripts/peers/requirements.txt
echo "$want" >"$stamp"
echo "setup_peers: $("$PEERS_VENV/bin/python" -c 'import deepspeed, torch; print("deepspeed", deepspeed.__version__, "torch", torch.__version__)' 2>/dev/null | tail -1)"
