#!/usr/bin/env bash
# Installs the Debian packages the integration tests run for real: Prometheus (and
# promtool), Alertmanager (and amtool), PostgreSQL, Slurm (slurmctld, slurmd, slurm-client),
# munge, systemd-analyze (package systemd: it verifies deploy/systemd/) and chromium (it renders
# /docs offline, tests/api/test_docs_offline.py), mmdebstrap and buildah (they build the container images
# from Debian's packages and run them, tests/integration/test_images.py). Only as root and
# only what is missing; otherwise says what is missing (the tests then skip locally, fail in CI).
set -euo pipefail

missing=()
command -v prometheus >/dev/null 2>&1 || [ -x /usr/bin/prometheus ] || missing+=(prometheus)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
{ command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1; } \
  || missing+=(prometheus-alertmanager)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing+=(postgresql)
# slurmctld, slurmd and munged live in /usr/sbin, which a non-root PATH may lack.
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || missing+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || [ -x /usr/sbin/slurmd ] || missing+=(slurmd)
command -v scontrol >/dev/null 2>&1 || missing+=(slurm-client)
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || missing+=(munge)
command -v systemd-analyze >/dev/null 2>&1 || [ -x /usr/bin/systemd-analyze ] || missing+=(systemd)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
# de-duplicate
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then
  echo "system-deps: missing Debian packages: ${missing[*]} (run as root to install;" \
       "integration tests skip without them, and fail under CI=true)" >&2
  exit 0
fi
echo "system-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# Debian's postinst scripts try to start the services; nothing here needs them running
# (the tests start their own instances on loopback), so policy-rc.d forbids it.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created_policy=1
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
[ "$created_policy" -eq 1 ] && rm -f "$policy"
echo "system-deps: done" >&2
