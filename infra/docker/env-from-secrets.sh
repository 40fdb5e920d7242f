#!/bin/sh
# Entry point of the stack's containers: for every NAME_FILE=path in the environment, set NAME
# to the file's content and drop NAME_FILE, then run the command. Secrets live in files
# (compose secrets, Kubernetes Secret volumes) and never in infra/.env or `docker inspect`.
#   env-from-secrets.sh COMMAND [ARGS...]
set -eu
for name in $(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)_FILE=.*/\1/p'); do
    case "$name" in
        # NAME__FILE is Grafana's own convention: Grafana reads that file itself.
        *_) continue ;;
    esac
    eval "path=\${${name}_FILE}"
    if [ ! -r "$path" ]; then
        echo "env-from-secrets: ${name}_FILE names $path, which cannot be read" >&2
        exit 2
    fi
    value=$(cat "$path")
    export "$name=$value"
    unset "${name}_FILE"
done
exec "$@"
