#!/usr/bin/env bash
# Install the Debian packages the controller-side tests and the simulated fleet need.
# Idempotent: installs only what is missing. Needs root (or passwordless sudo).
set -euo pipefail
pkgs=(docker.io debootstrap openssh-client iproute2 rsync git make python3-venv shellcheck util-linux curl ca-certificates
      prometheus  # promtool for tests/unit/roles/test_vllm_monitoring_rules.py (Debian ships it in this package)
      chromium)  # headless: the fault suite's look at Prometheus's alerts page (tests/e2e/faults/test_45_watchdog.py)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "host-deps: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  # Only promtool is wanted: a Prometheus daemon the package's postinst started on a systemd host is stopped again.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus.service || true
  fi
else
  echo "host-deps: all present"
fi
