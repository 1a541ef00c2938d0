#!/usr/bin/env bash
# Apply every patches/*.patch to an installed vLLM, and prove each one took.
#
# Usage: bash patches/apply.sh [ROOT]
#   ROOT is the folder that holds the `vllm/` package; by default the one `python3` (or `python`) imports.
#   PATCH_DIR (environment) is the folder of *.patch files; by default this script's own folder.
#
# For each patch, in name order:
#   target file absent                      -> "not applicable" (this vLLM no longer has that file)
#   applies cleanly (patch --dry-run, no fuzz) -> apply it, then prove it: the reverse dry-run succeeds
#                                              and the bug's own line (its Bug-Pattern) is gone -> "applied"
#   reverse dry-run succeeds                -> "already applied" (running the script twice is safe)
#   the Bug-Pattern line is not in the file -> "already fixed" by this vLLM (upstream fixed it)
#   otherwise                               -> FAIL: the bug is there and the patch does not fit
# Finally no file under ROOT/vllm may still match any Bug-Pattern (a bug that moved fails the build).
# Exit status: 0 when every patch passed, 1 when one failed, 2 for bad usage.
set -euo pipefail

# PATCH_DIR picks another set (patches/native/ holds the native runtime's vLLM 0.32 patches).
patch_dir="$(cd "${PATCH_DIR:-$(dirname "$0")}" && pwd)"

say() { printf 'patches: %s\n' "$*"; }
die() { printf 'patches: FAIL: %s\n' "$*" >&2; exit 1; }

find_root() {
  local python
  for python in python3 python; do
    command -v "$python" >/dev/null 2>&1 || continue
    if "$python" -c 'import importlib.util as u, os, sys
spec = u.find_spec("vllm")
sys.exit(1) if spec is None else print(os.path.dirname(list(spec.submodule_search_locations)[0]))' 2>/dev/null
    then
      return 0
    fi
  done
  return 1
}

if [ "$#" -gt 1 ]; then
  echo "usage: bash patches/apply.sh [ROOT]  (ROOT holds the vllm/ package)" >&2
  exit 2
fi
if [ "$#" -eq 1 ]; then
  root="$1"
else
  root="$(find_root)" || die "no python3/python here imports vllm; pass the folder that holds vllm/ as ROOT"
fi
[ -d "$root/vllm" ] || { echo "patches: ROOT=$root holds no vllm/ package" >&2; exit 2; }
command -v patch >/dev/null 2>&1 || die "the 'patch' command is missing; install it (dnf/apt-get install patch)"

shopt -s nullglob
patches=("$patch_dir"/*.patch)
[ "${#patches[@]}" -gt 0 ] || die "no *.patch files in $patch_dir"

# patch(1) options: strict (no fuzz), never ask (-f), no backup files, quiet.
strict=(-d "$root" -p1 --fuzz=0 -f --no-backup-if-mismatch -s)
patterns=()
for file in "${patches[@]}"; do
  name="$(basename "$file")"
  target="$(sed -n 's#^+++ b/\([^[:space:]]*\).*#\1#p' "$file" | head -n 1)"
  pattern="$(sed -n 's/^Bug-Pattern: //p' "$file" | head -n 1)"
  [ -n "$target" ] || die "$name: no '+++ b/<file>' line; is it a unified diff?"
  [ -n "$pattern" ] || die "$name: no 'Bug-Pattern:' line naming the buggy line to look for"
  patterns+=("$pattern")

  if [ ! -f "$root/$target" ]; then
    say "$name: not applicable: this vLLM has no $target"
  elif patch "${strict[@]}" --dry-run -i "$file" </dev/null >/dev/null 2>&1; then
    patch "${strict[@]}" -i "$file" </dev/null
    patch "${strict[@]}" --dry-run -R -i "$file" </dev/null >/dev/null 2>&1 \
      || die "$name: patch ran but its reverse does not fit $target; inspect that file"
    if grep -qE -- "$pattern" "$root/$target"; then
      die "$name: applied, but $target still matches '$pattern'"
    fi
    say "$name: applied to $target (verified: the reverse fits and '$pattern' is gone)"
  elif patch "${strict[@]}" --dry-run -R -i "$file" </dev/null >/dev/null 2>&1; then
    say "$name: already applied to $target"
  elif ! grep -qE -- "$pattern" "$root/$target"; then
    say "$name: already fixed: $target has no line matching '$pattern'"
  else
    die "$name: does not apply to $target, which still has the bug ('$pattern'); update the patch"
  fi
done

for pattern in "${patterns[@]}"; do
  if hits="$(grep -rlE --include='*.py' -- "$pattern" "$root/vllm")"; then
    die "the bug '$pattern' is still in: $hits (no patch covers it)"
  fi
done
say "all ${#patches[@]} patches passed; no file under $root/vllm has a known bug line"
