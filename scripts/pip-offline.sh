# Sourced by the setup scripts: pip_offline ARGS... runs `python3 -m pip ARGS` with --no-index and the local
# package folders that this machine's pip configuration names (find-links, file:// indexes), so pip never waits on
# a network it cannot reach. Returns non-zero when no local folder is configured.
pip_offline() {
  local links=()
  mapfile -t links < <(pip_local_links)
  ((${#links[@]})) || return 1
  python3 -m pip "$1" --no-index "${links[@]}" "${@:2}"
}

# pip_local_links: the --find-links arguments for those local folders, one per line (none when there are none).
pip_local_links() {
  local d
  for d in $(python3 -m pip config list 2>/dev/null | sed -n "s/.*\(find-links\|extra-index-url\|index-url\)='\(.*\)'/\2/p" | tr ' ' '\n' |
    sed 's#^file://##; s#/simple/*$#/files#' | sort -u); do
    [[ -d $d ]] && printf -- '--find-links\n%s\n' "$d"
  done
  return 0
}
