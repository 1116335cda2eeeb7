#!/usr/bin/env bash
# tests/layering_test.sh — the folders' dependencies run one way (DEVELOPERS.md): every
# `#include "<folder>/..."` of a source file names its own folder or one it may use.
# Usage: layering_test.sh SOURCE_DIR. Prints each include that points the wrong way.
set -u
cd "$1" || exit 2
declare -A may=(
  [common]="common"
  [kernels]="common kernels"
  [comm]="common comm"
  [launch]="common launch"
  [engine/formats]="common engine/formats"
  [engine/text]="common engine/text"
  [engine/model]="common kernels engine/formats engine/model"
  [engine/parallel]="common kernels comm launch engine/formats engine/model engine/parallel"
  [engine/serving]="common kernels engine/model engine/text engine/serving"
  [engine/synth]="common kernels engine/formats engine/text engine/synth"
  [engine/http]="common engine/model engine/text engine/serving engine/http"
  [engine/cli]="common kernels comm launch engine/formats engine/text engine/model engine/parallel engine/serving engine/synth engine/http engine/cli"
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
[ "$files" -gt 50 ] && [ "$bad" -eq 0 ]
