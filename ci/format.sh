#!/usr/bin/env bash
# ci/format.sh [--fix] — the C and CUDA sources in the style of .clang-format.
# Without --fix it checks (clang-format --dry-run --Werror) and exits 1 naming the files
# that differ; with --fix it rewrites them.  ci/test.sh runs the check.  The style is
# pinned to Debian 12's clang-format 14: another major version may format differently.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang-format >/dev/null; then
    echo "ci/format.sh: clang-format not found (ci/install-deps.sh installs it)" >&2
    exit 2
fi
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
    clang-format -i "${files[@]}"
    exit 0
fi
bad=()
for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
    echo "ci/format.sh: ${#bad[@]} of ${#files[@]} files differ from .clang-format (bash ci/format.sh --fix):"
    printf '  %s\n' "${bad[@]}"
    exit 1
fi
echo "format: ${#files[@]} C/CUDA files match .clang-format ($(clang-format --version | grep -o 'version [0-9.]*'))"
