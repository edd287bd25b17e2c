#!/usr/bin/env bash
# Runs every test of the workspace on a machine that has only a Rust toolchain.
#
# First it installs what the tests use beyond cargo, when it is missing:
#   Debian packages (as root, or through sudo):
#     fonts-dejavu-core  the soak chart's font (the soak smoke test draws a chart)
#     postgresql         server binaries; the fleet's tests start throwaway clusters
#     nodejs, npm        the viewer's JavaScript tests (Debian's Node 18 will do: playwright-core
#                        is pinned to 1.61.1, the last that runs on it)
#     chromium           the only browser the viewer's tests drive (never a downloaded one)
#     iproute2           `ss`, whose per-socket counters the soak charts as TCP segments per tick
#   npm packages, into net/view/web/node_modules (pinned by its package-lock.json):
#     playwright-core, fzstd
# Then: cargo test --workspace (arguments are passed on, e.g. `-- --nocapture`).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== what the tests need beyond cargo"
PACKAGES=()
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || PACKAGES+=(fonts-dejavu-core)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || PACKAGES+=(postgresql)
command -v node >/dev/null || PACKAGES+=(nodejs)
command -v npm >/dev/null || PACKAGES+=(npm)
[ -x /usr/bin/chromium ] || PACKAGES+=(chromium)
command -v ss >/dev/null || PACKAGES+=(iproute2)
# The fleet's metrics test runs a real Prometheus (and promtool) against a fleet.
command -v prometheus >/dev/null || PACKAGES+=(prometheus)
if [ ${#PACKAGES[@]} -gt 0 ]; then
  echo "installing Debian packages: ${PACKAGES[*]}"
  if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
  elif command -v sudo >/dev/null; then
    SUDO=(sudo)
  else
    echo "error: the tests need the Debian packages ${PACKAGES[*]}; install them as root (apt-get install ${PACKAGES[*]}) or give this user sudo" >&2
    exit 2
  fi
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq "${PACKAGES[@]}"
else
  echo "Debian packages: all there"
fi
WEB=net/view/web
# Always: npm ci takes a second, and it puts back the pinned versions over any older install.
echo "npm packages in $WEB: playwright-core, fzstd (npm ci, as package-lock.json pins them)"
npm ci --no-audit --no-fund --prefix "$WEB"
echo "postgresql: $(ls -d /usr/lib/postgresql/*/bin | head -1)"
echo "node: $(node --version)"
echo "chromium: $(/usr/bin/chromium --version)"

echo "== cargo test --workspace"
exec cargo test --workspace "$@"
