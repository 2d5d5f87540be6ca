#!/bin/sh
# Planted on a PATH as @NAME@: leaves a marker where a process of the platform runs it.
case "$0" in
  /tmp/dlaas-plant/*) place=tmp ;;
  /var/tmp/dlaas-plant/*) place=var-tmp ;;
  /dev/shm/dlaas-plant/*) place=shm ;;
  *) place=archive ;;
esac
if [ "$(id -u)" = 0 ] || [ -n "$DLAAS_REDIS_URL$DLAAS_AGENT_TOKEN$DLAAS_JOB_TOKEN" ]; then
  echo "uid $(id -u): $0 $*" > "@MARKERS@/path-@NAME@-$place-$$" 2>/dev/null
fi
exec @REAL@ "$@"
