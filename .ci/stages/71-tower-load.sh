#!/usr/bin/env bash
# tollgate-tower under real HTTP load: the example proxy (no layer / tollgate-tower's layer /
# tower_governor 0.8) in front of a trivial upstream on loopback, driven by wrk (installed
# from apt if missing): all-allowed and all-denied, 1 and 100,000 client keys, 3 s per
# measured run (tollgate-tower/scripts/load.sh, short form).
#
# Fails only on a real fault: a build or server that does not start, wrk failing, an
# all-allowed run with refusals, an all-denied run that lets requests through. The speed
# expectations (layer <= 1 µs CPU per allowed request, deny path no slower than allow path, both
# faster than tower_governor) are printed as met or MISSED and never fail the stage: wall
# time on a shared machine is too noisy to gate on.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tollgate-tower/scripts/load.sh
