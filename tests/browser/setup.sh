#!/usr/bin/env bash
# Installs what tests/editor/test_browser.py needs: Debian's chromium and the pinned
# playwright-core (npm ci here). Prints one "BROWSER SETUP: OK" or
# "BROWSER SETUP: FAILED (...)" line, and exits 1 on failure. dev.py goes on
# either way: without a browser the browser tests skip and say why (and a run
# that requires the browser tier, like CI's, fails on that skip).
set -u
cd "$(dirname "$0")"

problems=()
chromium="${CHROMIUM_PATH:-$(command -v chromium || echo /usr/bin/chromium)}"

if [ ! -x "$chromium" ]; then
  if [ "$(id -u)" = 0 ]; then as_root=(); elif sudo -n true 2>/dev/null; then as_root=(sudo -n); else as_root=(); fi
  if [ "$(id -u)" = 0 ] || [ ${#as_root[@]} -gt 0 ]; then
    echo "installing chromium with apt-get..."
    "${as_root[@]}" apt-get update -qq >/dev/null \
      && DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq chromium >/dev/null \
      || problems+=("apt-get install chromium failed")
    chromium="$(command -v chromium || echo /usr/bin/chromium)"
  else
    problems+=("chromium missing and no root/sudo to apt-get install it")
  fi
fi
[ -x "$chromium" ] && echo "chromium: $("$chromium" --version 2>/dev/null)"

# A CJK font, so that the zh editor's screenshots show Chinese instead of empty boxes (the checks read the DOM
# and pass without it).
if ! fc-list :lang=zh 2>/dev/null | grep -q .; then
  if [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; then
    as_root=(); [ "$(id -u)" = 0 ] || as_root=(sudo -n)
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq fonts-wqy-zenhei >/dev/null \
      || echo "note: apt-get install fonts-wqy-zenhei failed; zh screenshots will show boxes"
  else
    echo "note: no CJK font and no root/sudo; zh screenshots will show boxes"
  fi
fi

if ! command -v npm >/dev/null; then
  problems+=("npm missing (install Node.js 20+)")
elif ! npm ci --no-audit --no-fund --loglevel=error; then
  problems+=("npm ci failed")
fi

if [ ${#problems[@]} -eq 0 ] && [ -x "$chromium" ] && [ -d node_modules/playwright-core ]; then
  echo "BROWSER SETUP: OK (playwright-core $(node -p 'require("playwright-core/package.json").version'))"
else
  [ ${#problems[@]} -eq 0 ] && problems=("chromium or playwright-core missing")
  echo "BROWSER SETUP: FAILED ($(printf '%s; ' "${problems[@]}" | sed 's/; $//'))"
  exit 1
fi
