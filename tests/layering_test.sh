#!/usr/bin/env bash
# tests/layering_test.sh — the folders' dependencies run one way (DEVELOPERS.md): every
# `#include "<folder>/..."` of a source file names its own folder or one it may use.
# Private headers: a module's `*_internal.h` (the one private suffix; `_impl.h` is refused) is
# included only inside its room (`kernels/x86/*.c` for kernels/...), or by that room's own
# white-box tests under tests/unit/<room>/; never by bench/, another room or another room's tests.
# Usage: layering_test.sh SOURCE_DIR. Prints each include that points the wrong way.
set -u
cd "$1" || exit 2
declare -A may=(
  [common]="common"
  [kernels]="common kernels"
  [comm]="common comm"
  [launch]="common launch"
  [engine/json]="common engine/json"
  [engine/formats]="common engine/json engine/formats"
  [engine/text]="common engine/json engine/text"
  [engine/model]="common kernels engine/json engine/formats engine/model"
  [engine/parallel]="common kernels comm launch engine/formats engine/model engine/parallel"
  [engine/serving]="common kernels engine/model engine/text engine/serving"
  [engine/synth]="common kernels engine/json engine/formats engine/text engine/synth"
  [engine/http]="common engine/model engine/text engine/serving engine/http"
  [engine/cli]="common kernels comm launch engine/json engine/formats engine/text engine/model engine/parallel engine/serving engine/synth engine/http engine/cli"
)
bad=0 files=0
for room in "${!may[@]}"; do
  for f in "$room"/*.c "$room"/*.h "$room"/*/*.c "$room"/*/*.h; do
    [ -f "$f" ] || continue
    files=$((files + 1))
    while IFS= read -r inc; do
      target=$(printf '%s' "$inc" | sed -E 's#^(engine/[a-z_]+|[a-z_]+)/.*#\1#')
      case " ${may[$room]} " in
        *" $target "*) ;;
        *) echo "layering: $f includes $inc ($room may use: ${may[$room]})"; bad=$((bad + 1)) ;;
      esac
    done < <(sed -nE 's/^#include "(([a-z_]+\/)+[a-z_0-9]+\.h)".*/\1/p' "$f")
  done
done
echo "layering: $files files, $bad includes pointing the wrong way"

# Private headers, over every source file of the tree (build outputs excluded).
priv=0 pfiles=0
while IFS= read -r f; do
  f=${f#./}
  pfiles=$((pfiles + 1))
  case "$f" in
    *_impl.h) echo "layering: $f: private headers are named *_internal.h"; priv=$((priv + 1)) ;;
  esac
  while IFS= read -r inc; do
    owner=$(printf '%s' "$inc" | sed -E 's#^(engine/[a-z_]+|[a-z_]+)/.*#\1#')
    case "$f" in
      "$owner"/*|tests/unit/"$owner"/*) ;;
      *) echo "layering: $f includes $inc, private to $owner/"; priv=$((priv + 1)) ;;
    esac
  done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"(([a-z_0-9]+\/)+[a-z_0-9]+_(internal|impl)\.h)".*/\1/p' "$f")
done < <(find . \( -name .git -o -name 'build*' \) -prune -o -type f \( -name '*.c' -o -name '*.h' \) -print)
echo "layering: $pfiles files, $priv private-header includes from outside their module"
[ "$files" -gt 50 ] && [ "$bad" -eq 0 ] && [ "$pfiles" -gt 50 ] && [ "$priv" -eq 0 ]
