#!/usr/bin/env bash
# Run by `npm test` (its pretest step) before the suite: the system packages the tests need.
#   g++, make      the model runner's CPU build (cuda/, built by the engine tests when missing)
#   redis-server   the shared-state and remote KV-tier tests start a real one of their own
#   python3        the cross-checks against the Python mirrors (/usr/bin/python3, not a pyenv shim)
# Missing ones are installed with apt-get when running as root on Debian/Ubuntu; otherwise the
# exact install line is printed and the step fails, before any test runs.
set -uo pipefail

missing=()
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
[ -x /usr/bin/python3 ] || missing+=(python3)
[ ${#missing[@]} -eq 0 ] && exit 0

line="apt-get install -y ${missing[*]}"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test prerequisites: installing ${missing[*]} ($line)"
  export DEBIAN_FRONTEND=noninteractive
  if apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
    exit 0
  fi
  echo "test prerequisites: '$line' failed; install ${missing[*]} and run the tests again" >&2
  exit 1
fi
echo "test prerequisites: missing ${missing[*]}; the tests need them. Install them, then run the tests again:" >&2
echo "  sudo $line" >&2
exit 1
