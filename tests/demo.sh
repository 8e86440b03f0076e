#!/bin/sh
# SPDX-License-Identifier: MIT
# The README's demo (tools/pm-demo.sh) as a test: it must end by itself with
# every crash contained and a clean stop.
exec "$(dirname "$0")/../tools/pm-demo.sh" "${PM_BUILD_DIR:-.}"
