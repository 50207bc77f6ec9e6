#!/usr/bin/env bash
# Fails when generated code under apis/, apiserver/openapi/ or client/ is
# stale: regenerates into a scratch copy of the tree and diffs.
set -o errexit
set -o nounset
set -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
SCRATCH="$(mktemp -d)"
trap 'rm -rf "${SCRATCH}"' EXIT

# Copy the tracked and untracked-but-not-ignored files, so the check sees
# exactly what would be committed.
cd "${ROOT}"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
done | xargs -0 cp --parents -t "${SCRATCH}"
mkdir -p "${SCRATCH}/bin"

(cd "${SCRATCH}" && CODEGEN_BIN="${ROOT}/bin/codegen" hack/update-codegen.sh >/dev/null)

ret=0
for d in apis apiserver/openapi client hack/api-rule-violations.list; do
    diff -Naupr "${ROOT}/${d}" "${SCRATCH}/${d}" || ret=1
done
if [ "${ret}" -ne 0 ]; then
    echo "Generated code is stale. Run hack/update-codegen.sh and commit the result." >&2
    exit 1
fi
echo "Generated code is up to date."
