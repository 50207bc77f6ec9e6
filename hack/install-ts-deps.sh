#!/usr/bin/env bash
# Installs the TypeScript SDK's packages (sdk/typescript) from its lockfile
# with npm ci and builds it with tsc, for its tests (npm test, and the e2e
# test TestTypeScriptSDK). A re-run with node_modules and dist up to date
# with the lockfile and the sources does nothing.
set -o errexit -o nounset -o pipefail

SDK="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/sdk/typescript"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node and npm (Node >= 20) are needed for sdk/typescript: install them" >&2
  exit 1
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if (( major < 20 )); then
  echo "sdk/typescript needs Node >= 20, found $(node --version)" >&2
  exit 1
fi

cd "${SDK}"
# npm ci rewrites node_modules/.package-lock.json; newer than the lockfile
# means it installed from this lockfile.
if [[ ! node_modules/.package-lock.json -nt package-lock.json ]]; then
  npm ci --no-audit --no-fund --prefer-offline
fi
if [[ ! -f dist/index.js ]] || [[ -n "$(find src tsconfig.json -newer dist/index.js -print -quit)" ]]; then
  npm run --silent build
fi
