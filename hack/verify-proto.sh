#!/usr/bin/env bash
# Fails when the committed generated Go for proto/*.proto is stale: regenerates
# into a scratch directory and compares.
set -o errexit -o nounset -o pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "${SCRATCH}"' EXIT

"${REPO_ROOT}/hack/update-proto.sh" "${SCRATCH}"

# The protoc version stamp is ignored so that a patch-level protoc difference
# between machines does not fail verification; the plugins are pinned.
# doc.go and notstarted*.go (the NotStarted error detail's helpers) are
# written by hand beside the generated files.
for pkg in runtimev1 runtimedv1; do
  if ! diff -ru -x doc.go -x 'notstarted*.go' -I '^//[[:space:]]*protoc[[:space:]]' "${REPO_ROOT}/proto/${pkg}" "${SCRATCH}/proto/${pkg}"; then
    echo "proto/${pkg} is stale: run 'make proto' (hack/update-proto.sh) and commit the result" >&2
    exit 1
  fi
done
echo "proto/runtimev1 and proto/runtimedv1 are up to date"
