#!/bin/sh
# Fake docker CLI of one scenario node: `inspect` prints a container object whose State is state.json, Image the
# image_id file and the spec-hash label the spec_hash file (the JSON shape `docker inspect --type container` prints),
# `logs [--tail N]` prints log.txt, `rm -f NAME` removes the container (state.json) and notes NAME in removed.
d=$(dirname "$0")
case "$1" in
  inspect) if [ -f "$d/state.json" ]; then printf '[{"Name": "/vllm_rank", "Image": "%s", "Config": {"Labels": {"dgxspark.vllm.spec-hash": "%s"}}, "State": ' \
             "$(cat "$d/image_id")" "$(cat "$d/spec_hash")"; cat "$d/state.json"; echo '}]'; else echo "Error: No such container" >&2; exit 1; fi ;;
  logs) if [ "$2" = "--tail" ]; then tail -n "$3" "$d/log.txt"; else cat "$d/log.txt"; fi ;;
  rm) rm -f "$d/state.json"; echo "$3" >>"$d/removed"; echo "$3" ;;
  *) echo "fake docker: $*" >&2; exit 2 ;;
esac
