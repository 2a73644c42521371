#!/usr/bin/env bash
# Run by `npm test` (its pretest step) before the suite: the system packages the tests need.
#   g++, make      the model runner's CPU build (cuda/, built by the engine tests when missing)
#   redis-server   the shared-state and remote KV-tier tests start a real one of their own
#   python3        the cross-checks against the Python mirrors (/usr/bin/python3, not a pyenv shim)
#   python3-numpy  llama.cpp's gguf-py, which writes the random-weight files of the llama.cpp oracle tests
#   python3-yaml   gguf-py imports it too
#   python3-jinja2 the reference renderer of the models' own chat templates (test/model/chatTemplateReference)
#   systemd        systemd-analyze verify, the check of the units in deploy/systemd/ (test/deploy/)
#   git            the sparse checkout of llama.cpp's sources for that oracle (tools/llama-oracle/setup.sh)
#   chromium       the status page's test opens GET / in a real headless browser
# Missing ones are installed with apt-get when running as root on Debian/Ubuntu; otherwise the
# exact install line is printed and the step fails, before any test runs. Then the llama.cpp oracle
# is set up (tools/llama-oracle/setup.sh: a no-op when it already is).
set -uo pipefail

missing=()
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
if [ -x /usr/bin/python3 ]; then
  /usr/bin/python3 -c "import numpy" >/dev/null 2>&1 || missing+=(python3-numpy)
  /usr/bin/python3 -c "import yaml" >/dev/null 2>&1 || missing+=(python3-yaml)
  /usr/bin/python3 -c "import jinja2" >/dev/null 2>&1 || missing+=(python3-jinja2)
else
  missing+=(python3 python3-numpy python3-yaml python3-jinja2)
fi

set_up_oracle() {
  bash "$(dirname "$0")/../tools/llama-oracle/setup.sh" >/dev/null && return 0
  echo "test prerequisites: setting up the llama.cpp oracle failed (bash tools/llama-oracle/setup.sh shows why)" >&2
  return 1
}

[ ${#missing[@]} -eq 0 ] && { set_up_oracle; exit $?; }

line="apt-get install -y ${missing[*]}"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test prerequisites: installing ${missing[*]} ($line)"
  export DEBIAN_FRONTEND=noninteractive
  if apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
    set_up_oracle
    exit $?
  fi
  echo "test prerequisites: '$line' failed; install ${missing[*]} and run the tests again" >&2
  exit 1
fi
echo "test prerequisites: missing ${missing[*]}; the tests need them. Install them, then run the tests again:" >&2
echo "  sudo $line" >&2
exit 1
