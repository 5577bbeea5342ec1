#!/usr/bin/env bash
# The container's entrypoint: `routedvlm serve` configured from the environment, the way a Deployment sets it.
#   ROUTEDVLM_SMALL / ROUTEDVLM_LARGE   the pair (checkpoint folder, hub id, or <base_url>#<model> of a vLLM server)
#   ROUTEDVLM_MODELS                    or a ladder, cheapest first, separated by spaces (each becomes --model)
#   ROUTEDVLM_ROUTER                    router folder or models:/name@alias (default: serve's, models:/vlm-router@champion)
#   MLFLOW_TRACKING_URI                 the MLflow server of a models:/ router (--tracking-uri)
#   ROUTEDVLM_HOST / ROUTEDVLM_PORT     bind address and port (default 0.0.0.0:8000: a container is reached from outside)
#   ROUTEDVLM_REPLICA_ID                this replica's name in request ids and audit parts (default $HOSTNAME: the pod)
#   ROUTEDVLM_SERVE_<FLAG>              any other flag of `routedvlm serve`: ROUTEDVLM_SERVE_MAX_QUEUED=128 is
#                                       --max-queued 128; a switch (--audit-store-inputs) is on for 1/true/yes
#   ROUTEDVLM_API_KEY, ROUTEDVLM_BACKEND_API_KEY, ROUTEDVLM_FEEDBACK_KEY are read by serve itself.
# Arguments are appended to the command (`podman run IMAGE --max-queued 16`); a first argument that is not a flag
# runs instead of serve (`podman run -it IMAGE bash`). ROUTEDVLM_ENTRYPOINT_DRY_RUN=1 prints the command, one
# argument per line, and exits.
set -euo pipefail

if [[ $# -gt 0 && "$1" != -* ]]; then
    exec "$@"
fi

SWITCHES=" audit-store-inputs "
args=(serve --host "${ROUTEDVLM_HOST:-0.0.0.0}" --port "${ROUTEDVLM_PORT:-8000}")
[[ -n "${ROUTEDVLM_SMALL:-}" ]] && args+=(--small "$ROUTEDVLM_SMALL")
for model in ${ROUTEDVLM_MODELS:-}; do
    args+=(--model "$model")
done
[[ -n "${ROUTEDVLM_LARGE:-}" ]] && args+=(--large "$ROUTEDVLM_LARGE")
[[ -n "${ROUTEDVLM_ROUTER:-}" ]] && args+=(--router "$ROUTEDVLM_ROUTER")
[[ -n "${MLFLOW_TRACKING_URI:-}" ]] && args+=(--tracking-uri "$MLFLOW_TRACKING_URI")
replica="${ROUTEDVLM_REPLICA_ID:-${HOSTNAME:-}}"
[[ -n "$replica" ]] && args+=(--replica-id "$replica")

for name in $(compgen -e | grep -E '^ROUTEDVLM_SERVE_[A-Z0-9_]+$' | sort); do
    value="${!name}"
    flag="${name#ROUTEDVLM_SERVE_}"
    flag="${flag,,}"
    flag="${flag//_/-}"
    if [[ "$SWITCHES" == *" $flag "* ]]; then
        case "${value,,}" in
            1|true|yes) args+=("--$flag") ;;
            0|false|no|"") ;;
            *) echo "error: $name must be 1/true/yes or 0/false/no (the switch --$flag); got '$value'" >&2; exit 2 ;;
        esac
    else
        args+=("--$flag" "$value")
    fi
done

args+=("$@")
if [[ "${ROUTEDVLM_ENTRYPOINT_DRY_RUN:-0}" == 1 ]]; then
    printf '%s\n' routedvlm "${args[@]}"
    exit 0
fi
exec routedvlm "${args[@]}"
