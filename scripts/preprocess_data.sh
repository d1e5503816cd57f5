#!/usr/bin/env bash
# Tokenize a dataset described by configs/datasets/<name>.yaml into a MindRecord file.
#   bash scripts/preprocess_data.sh <name> [--strict] [--overwrite] [key=value ...]
# <name> may also be a path to a yaml file. Relative paths inside the yaml are taken from the
# current directory. Set PYTHON to choose the interpreter (default: python).
set -euo pipefail

if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
  echo "usage: bash scripts/preprocess_data.sh <name|config.yaml> [--strict] [--overwrite] [key=value ...]" >&2
  exit 2
fi
name=$1
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "$name" in
  *.yaml|*.yml) config=$name ;;
  *) config="$root/configs/datasets/$name.yaml" ;;
esac
if [ ! -f "$config" ]; then
  echo "preprocess_data.sh: no config $config; available:" \
       "$(cd "$root/configs/datasets" && ls ./*.yaml | sed 's#^\./##; s#\.yaml$##' | tr '\n' ' ')" >&2
  exit 2
fi
# mindrl is importable from a checkout without installing it
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m mindrl.cli preprocess --config "$config" "$@"
