# Sourced by scripts/setup and scripts/lock, from the repository root: a .venv holding uv, and the
# find-links that pip is configured with (uv reads no pip configuration; torch's CPU build is there).
lock=requirements/lock.txt
python="${PYTHON:-python3}"

# The uv the lock pins (it locks itself), or the newest of the dev range before a first lock.
uv_wanted=$(sed -n 's/^uv==\([^ \\]*\).*/\1/p' "$lock" 2>/dev/null || true)
[ -x .venv/bin/python ] || "$python" -m venv .venv
if ! .venv/bin/uv --version 2>/dev/null | grep -q "^uv ${uv_wanted:-0.13.}"; then
  if [ -n "$uv_wanted" ]; then uv_spec="uv==$uv_wanted"; else uv_spec="uv<0.14"; fi
  .venv/bin/python -m pip install -q "$uv_spec"
fi

find_links=()
for link in ${PIP_FIND_LINKS:-} $("$python" -m pip config get global.find-links 2>/dev/null || true); do
  case " ${find_links[*]} " in *" $link "*) ;; *) find_links+=(--find-links "$link") ;; esac
done
