# The optional integrations the README's test command turns on (scripts/test.sh): serde, tokio's
# timer and tracing for the core crate; tollgate-tower's metrics and tracing. Sourced by the CI
# stages that lint them or reuse what the tests built.
# shellcheck disable=SC2034
features=tollgate/serde,tollgate/tokio,tollgate/tracing,tollgate-tower/metrics,tollgate-tower/tracing
