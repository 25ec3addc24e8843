#!/usr/bin/env bash
# setup.sh: install everything ltp-testbed needs on a Debian 12 machine, as root.
#
# Idempotent: Debian packages are installed only when missing, the virtual
# environment (.venv) is created once, and the project is reinstalled only when
# pyproject.toml, setup.py or the native core's build inputs changed. Run it as often as you like:
#     ./setup.sh
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"

if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: run me as root (Mininet and Open vSwitch need it): sudo ./setup.sh" >&2
    exit 2
fi

APT_PACKAGES=(
    mininet openvswitch-switch iperf3 ethtool iptables nftables tcpdump bridge-utils iproute2
    tshark   # reads the packet captures of `run-sweep --capture` (docs/reading-a-capture.md)
    iputils-ping procps
    dataset-fashion-mnist
    build-essential python3-venv python3-dev pkg-config
    libnetfilter-queue-dev clang libclang-rt-14-dev libbpf-dev
    libssl-dev   # libcrypto: the native core's AES-128-GMAC (mac=gmac128, docs/ltp-protocol.md §11)
    llvm-14   # llvm-profdata-14 and llvm-cov-14: `invoke fuzz` reports the fuzzer's coverage
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup.sh: installing Debian packages: ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Debian's python3 is 3.11 on bookworm, the version the torch 2.13.0 CPU wheel is built for.
if [ ! -x .venv/bin/python ]; then
    echo "setup.sh: creating the virtual environment .venv"
    /usr/bin/python3 -m venv .venv
fi

# Mininet's Python module comes from Debian (python3-mininet, pulled in by mininet); link only that
# package into the venv rather than exposing all of Debian's site-packages.
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ ! -e "$site/mininet" ]; then
    ln -s /usr/lib/python3/dist-packages/mininet "$site/mininet"
fi

stamp=.venv/.ltp-testbed-installed
# Build inputs of the native core: its C sources and headers and the cffi build script.
want=$(cat pyproject.toml setup.py $(find transports/native \( -name '*.[ch]' -o -name build_ffi.py \) \
    -not -path '*/build/*' 2>/dev/null | sort) 2>/dev/null | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "setup.sh: installing the project and its Python dependencies into .venv"
    .venv/bin/pip install -q --upgrade pip setuptools wheel
    .venv/bin/pip install -q -e '.[dev,cluster]'   # cluster: Ray, for run-sweep --cluster
    echo "$want" > "$stamp"
fi

# The delay line's NFQUEUE helper and the Gilbert-Elliott loss program with its loader (make
# rebuilds them only when their sources changed).
make -s -C topologies/impair/delay
make -s -C topologies/impair/geloss

.venv/bin/python -c 'import torch, mininet.net, os_ken, pandas, seaborn, invoke, ray' \
    || { echo "setup.sh: the virtual environment is incomplete; delete .venv and run ./setup.sh again" >&2; exit 1; }
echo "setup.sh: ready (.venv/bin/invoke --list shows the tasks)"
