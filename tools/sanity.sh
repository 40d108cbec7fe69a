#!/usr/bin/env bash
# ansible-test sanity needs a real ansible_collections/<ns>/<name> tree (it resolves the
# self-link and refuses it), so copy the files git knows into one and run there.
set -euo pipefail
root=${1:-/tmp/dgxspark-sanity}
[ $# -gt 0 ] && shift
src=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/ansible_collections/dgxspark/vllm"
rm -rf "$root"
mkdir -p "$dest" "$HOME/.ansible/test/cache"
# ansible-test's pip bootstrap script comes from a host we cannot reach; ship our own.
for v in 24_2 25_3; do cp "$src/tools/get_pip_stub.py" "$HOME/.ansible/test/cache/get_pip_$v.py"; done
cd "$src"
# a file deleted in the work tree but still in the index is left out (tar would stop on it)
git ls-files -z --cached --others --exclude-standard -- . ":(exclude)collections" |
  while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done |
  tar --null -T - -c | tar -x -C "$dest"
cd "$dest"
git init -q . && git add -A >/dev/null 2>&1 && git -c user.email=ci@local -c user.name=ci commit -qm sanity
# shellcheck disable=SC1091
source "$src/.venv/bin/activate"
run() { ansible-test sanity --local --python 3.11 --color no "$@"; }
run "$@" || { echo "sanity: retrying once (ansible-test bootstrap is occasionally flaky)"; run "$@"; }
