#!/usr/bin/env bash
# Installs what the Python SDK's tests (sdk/python/tests, run by the e2e
# test TestPythonSDK) need into the system Python, /usr/bin/python3: the
# official Kubernetes client, pytest, venv (with ensurepip) and setuptools,
# from Debian's packages only. A re-run with everything present does nothing.
set -o errexit -o nounset -o pipefail

PYTHON=/usr/bin/python3
PACKAGES=(python3 python3-kubernetes python3-pytest python3-venv python3-setuptools python3-wheel python3-pip)

if [[ -x "${PYTHON}" ]] && "${PYTHON}" -c 'import kubernetes, pytest, venv, ensurepip, setuptools, wheel, pip' >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "${PYTHON} lacks the SDK's test modules and apt-get is unavailable: install ${PACKAGES[*]} by hand" >&2
  exit 1
fi
SUDO=""
if [[ "$(id -u)" != "0" ]]; then SUDO="sudo"; fi
${SUDO} apt-get update -qq
DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null
"${PYTHON}" -c 'import kubernetes, pytest, venv, ensurepip, setuptools, wheel, pip'
