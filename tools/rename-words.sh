#!/bin/sh
# SPDX-License-Identifier: MIT
# rename-words.sh - one meaning per word: applies tools/rename-words.py
# (doc/glossary.md's vocabulary) to the git tree it is run in, then
# self-checks. Usage: sh tools/rename-words.sh [--check] [--review] [TOP]
# Exit 0: no old name left; 1: some left (printed).
set -eu
exec python3 "$(dirname "$0")/rename-words.py" "$@"
