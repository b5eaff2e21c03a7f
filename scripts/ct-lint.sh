#!/usr/bin/env bash
# `ct lint` (chart-testing) on charts/captcha-solver, as `make lint` runs it: Chart.yaml against ct's schema
# (yamale), Chart.yaml and values.yaml through yamllint, `helm lint --strict` with every ci/*-values.yaml, and the
# version-bump check: when the chart (what `helm package` puts in it, .helmignore applied) changed since the base,
# its Chart.yaml version must be greater than the base's.
#
# The base is, first found:
#   CT_BASE                        any branch or tag, e.g. CT_BASE=origin/main for a pull request
#   captcha-solver-<version>       the newest release tag merged into HEAD (what users can have pulled)
#   origin/main, main              the branch this one lands on (changes since their merge-base need a bump)
#
#   scripts/ct-lint.sh             lint; exit 1 with ct's message when something fails
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PATH=$ROOT/.tools/bin:$PATH
CHART=charts/captcha-solver
say() { echo "ct-lint: $*"; }

for t in ct helm yamllint yamale; do
  command -v "$t" >/dev/null || { say "FAILED: $t not found: run scripts/install-tools.sh --only ct,helm (make tools)" >&2; exit 1; }
done
[ -f .tools/ct/current/chart_schema.yaml ] || { say "FAILED: no .tools/ct/current: scripts/install-tools.sh --only ct" >&2; exit 1; }
scripts/chart-dependency.sh --check >/dev/null || scripts/chart-dependency.sh >/dev/null

base=${CT_BASE:-}
if [ -z "$base" ]; then
  base=$(git tag --merged HEAD --list 'captcha-solver-*' --sort=-version:refname | head -1)
fi
if [ -z "$base" ]; then
  for b in origin/main main; do
    git rev-parse --verify --quiet "$b^{commit}" >/dev/null && { base=$b; break; }
  done
fi
[ -n "$base" ] || { say "FAILED: no base for the version-bump check (no release tag, no origin/main or main; set CT_BASE)" >&2; exit 1; }
ref=$(git rev-parse --symbolic-full-name "$base" 2>/dev/null || true)
case $ref in
  refs/*) ;;
  *) ref=$(git rev-parse --symbolic-full-name "refs/tags/$base" 2>/dev/null || true)
     case $ref in refs/*) ;; *) say "FAILED: CT_BASE=$base is not a branch or tag" >&2; exit 1 ;; esac ;;
esac
# ct reads the old Chart.yaml as `git show <remote>/<target-branch>:<file>`: any split of the full ref name works
remote=${ref%/*} branch=${ref##*/}
base_args=(--config ct.yaml --remote "$remote" --target-branch "$branch")

changed=$(ct list-changed "${base_args[@]}" 2>&1) || { echo "$changed" >&2; say "FAILED: ct list-changed against $base" >&2; exit 1; }
if grep -qx "$CHART" <<<"$changed"; then
  old=$(git show "$ref:$CHART/Chart.yaml" 2>/dev/null | awk '/^version:/{print $2; exit}')
  say "$CHART changed since $base (merge-base $(git merge-base "$ref" HEAD | cut -c1-12)): its version must be greater than ${old:-<none>}"
  # without --charts ct lints the charts changed since the merge-base, with the version check (--charts turns it off)
  lint_args=("${base_args[@]}" --check-version-increment=true)
else
  say "$CHART unchanged since $base (as packaged): no version bump needed"
  lint_args=("${base_args[@]}" --charts "$CHART")
fi
out=$(mktemp); trap 'rm -f "$out"' EXIT
if ct lint "${lint_args[@]}" >"$out" 2>&1; then
  grep -E '^(Old|New) chart version|Chart version ok|✔' "$out" | sed 's/^/ct-lint: /' || true
  say "ok"
else
  cat "$out" >&2
  if grep -q "Needs a version bump" "$out"; then
    say "FAILED: $CHART changed since $base but its version was not bumped: raise version: in $CHART/Chart.yaml (and add the release to CHANGELOG.md and artifacthub.io/changes)" >&2
  else
    say "FAILED: ct lint $CHART (output above)" >&2
  fi
  exit 1
fi
