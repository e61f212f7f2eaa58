#!/bin/sh
# Install nvcc (the CUDA toolkit) from Debian's non-free archive, for `make cuda`.
# Idempotent: does nothing when nvcc is already on PATH (or at /usr/bin/nvcc).
# Debian bookworm ships CUDA 11.8 (nvcc 11.8.89, host compiler g++-11) as
# nvidia-cuda-toolkit; it builds for sm_80, sm_86, sm_87 and sm_90.
# Needs root (CI runs it as root; otherwise run it under sudo).
set -eu

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/bin/nvcc ]; then
	echo "install-cuda: nvcc present: $(nvcc --version 2>/dev/null | tail -n 2 | head -n 1)"
	exit 0
fi

. /etc/os-release
codename=${VERSION_CODENAME:-bookworm}

# Reuse the mirror host the system already uses for Debian (first deb URI
# naming a /debian archive); default to the canonical one.
mirror=$(grep -hoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
	/etc/apt/sources.list.d/*.list 2>/dev/null | head -n 1 | tr -d ' ' | sed 's:/*$::' || true)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian

# apt refuses one source with two Signed-By values: when the existing Debian
# source names the archive keyring (deb822 .sources files do), name it too.
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
opts=
if [ -f "$keyring" ] && grep -qsF "$keyring" /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; then
	opts="[signed-by=$keyring] "
fi
list=/etc/apt/sources.list.d/sinf-non-free.list
line="deb ${opts}$mirror $codename main contrib non-free non-free-firmware"
if ! grep -qsxF "$line" "$list"; then
	echo "$line" >"$list"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
# Without recommends: they add Nsight, the docs and, through libcuda1, the
# NVIDIA kernel driver built by DKMS, none of which compiling needs (and a
# kernel module build in a CI container only costs time).
apt-get install -y --no-install-recommends nvidia-cuda-toolkit
nvcc --version
