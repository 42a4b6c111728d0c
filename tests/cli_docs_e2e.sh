#!/usr/bin/env bash
# docs/cli.md holds when followed literally: every example it runs prints what the page shows,
# every synopsis names exactly the flags of `sluice SUBCOMMAND --help`, and every table of JSON
# fields names exactly the fields the command prints.
# Usage: SLUICE=path/to/sluice tests/cli_docs_e2e.sh [PAGE]     (PAGE: default docs/cli.md)
#        SLUICE=path/to/sluice tests/cli_docs_e2e.sh --planted  (checks this checker)
#
# What the page marks, and what is checked of it:
#
# - A run example: a ```sh fence. A line starting with `$ ` is a command (one ending in `\` goes
#   on on the next line); the lines after it, up to the next command, are what it prints, standard
#   output and error together. The fence's commands run in order in one bash (so `$ echo $?`
#   shows the status of the command before), in a fresh directory, with the built sluice ($SLUICE)
#   first on PATH, stdin empty, 60 s at most for the fence. Each printed line must match its
#   expected line, and there must be as many:
#     - the same text; or
#     - where the expected line holds `…`, each `…` stands for any text within the line; or
#     - an expected JSON object (a line `{...}`) matches a printed one with the same fields in the
#       same order, the same strings, and in place of each number a number of the same form
#       (an integer, or one with a decimal point): the figures of a benchmark vary, not its fields.
#   The line just before the fence may be a directive `<!-- run: [redis] [with NAME[,NAME...]] -->`:
#     redis: a throwaway redis-server is started (tests/lib.sh) and `127.0.0.1:6379` in the
#            commands becomes its address;
#     with:  each NAME is made in the directory first, as tests/doc_examples.py makes them:
#            NAME=PATH a copy of the repository's file PATH, else the content of the page's fence
#            whose info string names it (```yaml api.yaml, ```csv clients.csv).
#   A `$ ` line in any other fence fails: a shell session the page shows is run, or not shown.
#
# - A synopsis: a plain ``` fence whose first line starts with `sluice `. Each `sluice SUB...`
#   line (and the indented lines after it) names SUB's flags, optional ones in [brackets]. For each
#   SUB, the flags of all its synopsis lines together must be those `sluice SUB --help` lists
#   (--help aside), and a flag --help calls REQUIRED must appear outside brackets. Every
#   subcommand that `sluice --help` lists (`bench store`, `bench redis` under `bench`) must have
#   a synopsis.
#
# - A table of JSON fields: the line `<!-- fields -->`, then a Markdown table whose first column
#   names fields in backticks (`name`, several in one cell if need be). Its names must be exactly
#   the fields of the last JSON line the run example before it printed: none missing, none extra.
#
# Prints `ok`/`FAIL` per check, then `N passed, M failed`; exits 1 on any failure.
#
# --planted runs this script on a made-up page holding one example of each way to drift (a wrong
# expected output, a JSON line with a field renamed, a field table missing a field, a synopsis
# with a flag sluice lacks, without one it has and with a required one in brackets, a shell session
# outside a sh fence, a directive misspelt) beside examples that hold (with files, `…`, `echo $?`, a command going on
# over two lines, JSON figures that differ, a whole field table): exactly those must fail, and the
# subcommands without a synopsis there be reported.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
sluice=${SLUICE:?set SLUICE to the sluice binary}
[[ $sluice == */* ]] && sluice=$(cd "$(dirname "$sluice")" && pwd)/$(basename "$sluice")
source "$here/lib.sh"

# ------------------------------------------------------------------ --planted
if [[ ${1:-} == --planted ]]; then
  mkdir -p "$tmp/planted"
  page=$tmp/planted/page.md
  cat >"$page" <<'PAGE'
# Planted

```yaml d.yaml
domain: d
descriptors:
  - key: k
    rate_limit: {requests: 1, window: 1s}
```

<!-- run: with d.yaml,copied.yaml=tests/rules/sluice/multi.yaml -->
```sh
$ sluice check-config d.yaml copied.yaml
ok: 2 domains, 4 limits
$ printf '0 a\n' | sluice replay --algorithm fixed_window \
    --limit 1 --window 1s
0	a	allow	0	0	…	0
$ sluice check-config missing.yaml
missing.yaml: no such file …
$ echo $?
1
```

```sh
$ printf '0 a\n0 a\n' | sluice replay --algorithm fixed_window --limit 1 --window 1s
0	a	allow	0	0	1000	0
0	a	allow	0	0	1000	0
```

```sh
$ sluice bench store --seconds 0.2 --keys 10 --threads 1 --through backend
{"algorithm":"token_bucket","keys":99,"threads":1,"seconds":0.201,"decisions":1,"decisions_per_sec":1,"ns_per_decision":1.00,"rss_bytes":1,"bytes_per_key":1.00,"distribution":"uniform","limit":"1000/1d token_bucket","allowed":1,"store_entries":1,"clock_every":1,"prefetch":0,"through":"backend","local_hits":0,"lease_hits":0,"leases":0,"cpu_ns_per_decision":1.00,"warmup_seconds":0.001}
```

<!-- fields -->
| field | meaning |
|---|---|
| `algorithm`, `keys`, `threads`, `seconds`, `decisions`, `decisions_per_sec` | |
| `ns_per_decision`, `rss_bytes`, `bytes_per_key`, `distribution`, `limit`, `allowed` | |
| `store_entries`, `clock_every`, `prefetch`, `through`, `local_hits`, `lease_hits` | |
| `leases`, `cpu_ns_per_decision`, `warmup_seconds` | |

```sh
$ sluice bench store --seconds 0.2 --keys 10 --threads 1
{"algorithm":"token_bucket","keys":10,"threads":1,"seconds":0.201,"decisions":1,"decisions_per_sec":1,"ns_per_decision":1.00,"rss_bytes":1,"bytes_per_key":1.00,"distribution":"uniform","limit":"1000/1d token_bucket","allowed":1,"store_entries":1,"clock_every":1,"prefetch":0,"through":"store","local_hits":0,"lease_hits":0,"leases":0,"cpu_ns_per_decision":1.00,"warmup_second":0.001}
```

<!-- fields -->
| field | meaning |
|---|---|
| `algorithm`, `keys`, `threads`, `seconds`, `decisions`, `decisions_per_sec` | |
| `ns_per_decision`, `rss_bytes`, `bytes_per_key`, `distribution`, `limit`, `allowed` | |

```
sluice replay --algorithm ALG --limit N --window W [--burst B] [--input FILE]
sluice replay --config PATH --domain D [--input FILE]
sluice check-config PATH...
```

```
sluice explain [--config PATH] [--verbose] DESCRIPTORS
```

```console
$ sluice check-config d.yaml
```

<!-- run: wiht d.yaml -->
```sh
$ sluice check-config d.yaml
ok: 1 domains, 1 limits
```
PAGE
  out=$(bash "$0" "$page" 2>&1)
  printf '%s\n' "$out" | sed 's/^/  | /'
  fails=$(grep '^FAIL' <<<"$out")
  # What must fail, each by a piece of its FAIL line; every other FAIL must be a missing synopsis.
  expected=(
    "page.md:24: \`printf"            # replay: its second request is denied, the page says allowed
    "page.md:43: \`sluice bench"      # warmup_second: a field renamed
    "page.md:47: table"               # fields missing from the table
    "sluice explain: --domain"        # a flag sluice has, not on the page
    "sluice explain: --verbose"       # a flag sluice lacks
    "sluice explain: --config"        # required, shown [optional]
    "sluice bench store: no synopsis"
    "page.md:63:"                     # a session in a console fence
    "page.md:68:"                     # a directive misspelt
  )
  ok=1
  for e in "${expected[@]}"; do
    grep -qF -- "$e" <<<"$fails" || { echo "planted: no FAIL with [$e]"; ok=0; }
  done
  while IFS= read -r f; do
    [[ -n $f ]] || continue
    known=0
    for e in "${expected[@]}"; do [[ $f == *"$e"* ]] && known=1; done
    [[ $f == *": no synopsis on the page:"* ]] && known=1
    ((known)) || { echo "planted: an unexpected [$f]"; ok=0; }
  done <<<"$fails"
  for e in page.md:12: page.md:14: page.md:17: page.md:19: page.md:30: page.md:34: \
    "sluice replay:" "sluice check-config:"; do
    grep -q "^ok   $e" <<<"$out" || { echo "planted: [$e] did not pass"; ok=0; }
  done
  if ((ok)); then pass "planted: every drift was caught, and only those"; else fail "planted" "see above"; fi
  finish
  exit
fi

page=${1:-$root/docs/cli.md}
[[ -r $page ]] || { echo "cannot read $page"; echo "0 passed, 1 failed"; exit 1; }
name=$(basename "$page")

# ------------------------------------------------------------------ the page's blocks
# Splits the page into fences: fence_line[i] (the ``` line's number), fence_info[i], the body in
# $tmp/fence.i, fence_before[i] (the line just before it); and the field tables:
# fields_line[j], fields_after[j] (how many fences came before it), their names in $tmp/fields.j.
fence_line=() fence_info=() fence_before=() fields_line=() fields_after=()
declare -A named=()  # info string's second word -> fence index
n=0 in_fence=0 prev="" table=-1 lineno=0
while IFS= read -r line || [[ -n $line ]]; do
  lineno=$((lineno + 1))
  if ((in_fence)); then
    if [[ $line =~ ^\`\`\`[[:space:]]*$ ]]; then
      in_fence=0; n=$((n + 1))
    else
      printf '%s\n' "$line" >>"$tmp/fence.$n"
    fi
    prev=$line; continue
  fi
  if [[ $line == '```'* ]]; then
    in_fence=1; table=-1
    fence_line[n]=$lineno; fence_info[n]=${line#'```'}; fence_before[n]=$prev
    : >"$tmp/fence.$n"
    read -r _ second _ <<<"${fence_info[n]}"
    [[ -n ${second:-} ]] && named[$second]=$n
    prev=$line; continue
  fi
  if [[ $line == '<!-- fields -->' ]]; then
    table=${#fields_line[@]}; fields_line[table]=$lineno; fields_after[table]=$n row=0
    : >"$tmp/fields.$table"
  elif ((table >= 0)) && [[ $line == '|'* ]]; then
    row=$((row + 1))
    cell=${line#|}; cell=${cell%%|*}
    # (row 1 is the header, row 2 the |---| line)
    if ((row > 2)); then grep -o '`[^`]*`' <<<"$cell" | tr -d '`' >>"$tmp/fields.$table"; fi
  elif ((table >= 0)) && [[ -n ${line// /} ]]; then
    table=-1
  fi
  prev=$line
done <"$page"
if ((in_fence)); then
  fail "$name:${fence_line[n]}" "a fence that is never closed"; finish; exit
fi

# ------------------------------------------------------------------ matching output
# matches_ellipsis TEXT PATTERN: TEXT is PATTERN with each `…` standing for any text.
matches_ellipsis() {
  local text=$1 pattern=$2 piece
  piece=${pattern%%…*}
  [[ $text == "$piece"* ]] || return 1
  text=${text#"$piece"}; pattern=${pattern#*…}
  while [[ $pattern == *…* ]]; do
    piece=${pattern%%…*}
    [[ $text == *"$piece"* ]] || return 1
    text=${text#*"$piece"}; pattern=${pattern#*…}
  done
  [[ $text == *"$pattern" ]]
}
# json_shape LINE: LINE with each number replaced by <integer> or <decimal>, one field a line.
json_shape() {
  sed -E 's/([:,[])-?[0-9]+\.[0-9]+([eE][-+]?[0-9]+)?/\1<decimal>/g;
          s/([:,[])-?[0-9]+([eE][-+]?[0-9]+)?/\1<integer>/g' <<<"$1" | tr ',' '\n'
}
# line_matches EXPECTED ACTUAL
line_matches() {
  [[ $1 == "$2" ]] && return 0
  if [[ $1 == '{'*'}' ]]; then
    [[ $(json_shape "$1") == "$(json_shape "$2")" ]]; return
  fi
  [[ $1 == *…* ]] && matches_ellipsis "$2" "$1"
}

# ------------------------------------------------------------------ run examples
last_json="" last_json_at=""  # the last JSON line a run example printed, and where
redis_port=""

# make_files DIR NAME,NAME...: as tests/doc_examples.py makes them (header).
make_files() {
  local dir=$1 spec f src
  IFS=, read -ra spec <<<"$2"
  for f in "${spec[@]}"; do
    if [[ $f == *=* ]]; then
      src=${f#*=}; f=${f%%=*}
      mkdir -p "$(dirname "$dir/$f")"
      cp "$root/$src" "$dir/$f" || return 1
    elif [[ -n ${named[$f]:-} ]]; then
      mkdir -p "$(dirname "$dir/$f")"
      cp "$tmp/fence.${named[$f]}" "$dir/$f"
    else
      echo "no fence named $f on the page, nor =PATH"; return 1
    fi
  done
}

# run_example I: runs fence I's commands and checks what each printed.
run_example() {
  local i=$1 at="$name:${fence_line[$1]}" directive=() files="" use_redis=0
  local commands=() expects=() lines=() pending="" line j dir script problem lineno=${fence_line[$1]}
  if [[ ${fence_before[i]} == '<!-- run'* ]]; then
    if [[ ! ${fence_before[i]} =~ ^\<!--\ run:\ (.*)\ --\>$ ]]; then
      fail "$at" "not a directive: [${fence_before[i]}] (<!-- run: [redis] [with NAME,...] -->)"; return
    fi
    read -ra directive <<<"${BASH_REMATCH[1]}"
    for ((j = 0; j < ${#directive[@]}; j++)); do
      case ${directive[j]} in
        redis) use_redis=1 ;;
        with) j=$((j + 1)); files=${directive[j]:-} ;;
        *) fail "$at" "[${directive[j]}] in its directive: neither redis nor with NAME,..."; return ;;
      esac
    done
  fi
  while IFS= read -r line; do
    lineno=$((lineno + 1))
    if [[ -n $pending ]]; then
      pending+=$'\n'"$line"
      [[ $line == *\\ ]] && continue
      commands+=("$pending"); expects+=(""); pending=""
    elif [[ $line == '$ '* ]]; then
      lines+=("$lineno")
      if [[ $line == *\\ ]]; then pending=${line#'$ '}; continue; fi
      commands+=("${line#'$ '}"); expects+=("")
    elif ((${#commands[@]} == 0)); then
      fail "$at" "a sh fence must start with a \`\$ \` command" "$line"; return
    else
      expects[${#commands[@]} - 1]+=$line$'\n'
    fi
  done <"$tmp/fence.$i"
  ((${#commands[@]} > 0)) || { fail "$at" "a sh fence without a \`\$ \` command to run"; return; }

  dir=$tmp/run.$i
  mkdir -p "$dir"
  if [[ -n $files ]] && ! problem=$(make_files "$dir" "$files"); then
    fail "$at" "the files of its directive: $problem"; return
  fi
  if ((use_redis)) && [[ -z $redis_port ]]; then
    need_tools redis-server redis-cli
    start_redis_on || { fail "$at" "no redis-server for it"; return; }
    redis_port=$RPORT
  fi
  script=$tmp/run.$i.sh
  printf 'cd %q || exit 99\n' "$dir" >"$script"
  for j in "${!commands[@]}"; do
    line=${commands[j]}
    ((use_redis)) && line=${line//127.0.0.1:6379/127.0.0.1:$redis_port}
    printf '{ %s\n} >%q 2>&1\n' "$line" "$tmp/run.$i.out.$j" >>"$script"
  done
  PATH="$(dirname "$sluice"):$PATH" timeout 60 bash "$script" </dev/null >/dev/null 2>&1

  for j in "${!commands[@]}"; do
    local cmd_name want got k ok=1
    cmd_name="$name:${lines[j]}: \`$(head -1 <<<"${commands[j]}" | cut -c1-60)\`"
    if [[ ! -f $tmp/run.$i.out.$j ]]; then
      fail "$cmd_name" "did not run (the fence's 60 s ran out, or a command before it exited the shell)"
      continue
    fi
    mapfile -t want < <(printf '%s' "${expects[j]}")
    mapfile -t got <"$tmp/run.$i.out.$j"
    for k in "${!got[@]}"; do
      [[ ${got[k]} == '{'*'}' ]] && { last_json=${got[k]}; last_json_at="$name:${lines[j]}"; }
    done
    for k in "${!want[@]}"; do
      if ((k >= ${#got[@]})); then
        fail "$cmd_name" "printed ${#got[@]} lines, the page shows ${#want[@]}" \
          "$(cat "$tmp/run.$i.out.$j")"
        ok=0; break
      fi
      line_matches "${want[k]}" "${got[k]}" && continue
      ok=0
      if [[ ${want[k]} == '{'*'}' ]]; then
        fail "$cmd_name" "line $((k + 1)): not the JSON fields the page shows (- page, + printed)" \
          "$(diff <(json_shape "${want[k]}") <(json_shape "${got[k]}") | sed -n 's/^</-/p; s/^>/+/p')"
      else
        fail "$cmd_name" "line $((k + 1)): printed [${got[k]}], the page shows [${want[k]}]"
      fi
    done
    if ((ok && ${#got[@]} > ${#want[@]})); then
      fail "$cmd_name" "printed ${#got[@]} lines, the page shows ${#want[@]}" "$(cat "$tmp/run.$i.out.$j")"
      ok=0
    fi
    ((ok)) && pass "$cmd_name prints what the page shows"
  done
}

# check_fields J: the field table J against the last JSON line printed before it.
check_fields() {
  local j=$1 at="$name:${fields_line[$1]}: table" table printed
  if [[ -z $last_json ]]; then
    fail "$at" "no run example before it printed a JSON line"; return
  fi
  table=$(sort -u "$tmp/fields.$j")
  printed=$(grep -o '"[^"]*":' <<<"$last_json" | tr -d '":' | sort -u)
  if [[ $table == "$printed" ]]; then
    pass "$at: the fields $last_json_at prints, every one"
  else
    local unlisted unprinted
    unlisted=$(comm -13 <(echo "$table") <(echo "$printed") | tr '\n' ' ')
    unprinted=$(comm -23 <(echo "$table") <(echo "$printed") | tr '\n' ' ')
    fail "$at" "its fields are not those $last_json_at prints" \
      "${unlisted:+printed, not in the table: $unlisted}${unlisted:+${unprinted:+$'\n'}}${unprinted:+in the table, not printed: $unprinted}"
  fi
}

# ------------------------------------------------------------------ synopses
# synopsis_flags FILE: for each command line of a synopsis, `SUB<TAB><TAB>0`, then
# `SUB<TAB>FLAG<TAB>0|1` for each of its flags (1: in brackets).
synopsis_flags() {
  awk '
    { sub(/[ \t]+#.*$/, "") }
    /^sluice / { flush(); cmd = $0; next }
    { cmd = cmd " " $0 }
    END { flush() }
    function flush(   n, w, i, sub_, depth, c, name) {
      if (cmd == "") return
      n = split(cmd, w, /[ \t]+/)
      sub_ = ""
      for (i = 2; i <= n && w[i] ~ /^[a-z][a-z-]*$/; i++) sub_ = sub_ (sub_ == "" ? "" : " ") w[i]
      print sub_ "\t\t0"  # (the subcommand has a synopsis, flags or none)
      depth = 0
      for (i = 1; i <= length(cmd); i++) {
        c = substr(cmd, i, 1)
        if (c == "[") depth++
        else if (c == "]") depth--
        else if (substr(cmd, i, 2) == "--" && substr(cmd, i - 1, 1) ~ /[ [|]/) {
          name = substr(cmd, i)
          match(name, /^--[a-z0-9][a-z0-9-]*/)
          print sub_ "\t" substr(name, 1, RLENGTH) "\t" (depth > 0 ? 1 : 0)
          i += RLENGTH - 1
        }
      }
      cmd = ""
    }' "$1"
}

# help_flags SUB: `FLAG<TAB>0|1` (1: REQUIRED) of `sluice SUB --help`, --help aside.
help_flags() {
  # shellcheck disable=SC2086  # (SUB is one or two words)
  "$sluice" $1 --help 2>&1 | sed -nE 's/^  (-[a-zA-Z],)?(--[a-z0-9][a-z0-9-]*)(.*)$/\2\t\3/p' |
    awk -F'\t' '$1 != "--help" { print $1 "\t" ($2 ~ / REQUIRED/ ? 1 : 0) }'
}

# subcommands [SUB]: every subcommand `sluice [SUB] --help` lists, those of those included.
subcommands() {
  local s
  # shellcheck disable=SC2086
  for s in $("$sluice" ${1:-} --help 2>&1 | awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }'); do
    s=${1:+$1 }$s
    if "$sluice" $s --help 2>&1 | grep -q '^Subcommands:'; then subcommands "$s"; else echo "$s"; fi
  done
}

check_synopses() {
  local i subs sub page_flags help out missing extra required
  : >"$tmp/synopsis.tsv"
  for i in "${!fence_line[@]}"; do
    [[ -z ${fence_info[i]// /} ]] || continue
    [[ $(head -1 "$tmp/fence.$i") == 'sluice '* ]] || continue
    synopsis_flags "$tmp/fence.$i" >>"$tmp/synopsis.tsv"
  done
  mapfile -t subs < <(subcommands)
  ((${#subs[@]} >= 5)) || { fail "sluice --help" "lists ${#subs[@]} subcommands" "$("$sluice" --help 2>&1)"; return; }
  for sub in "${subs[@]}"; do
    if ! awk -F'\t' -v s="$sub" '$1 == s { f = 1 } END { exit !f }' "$tmp/synopsis.tsv"; then
      fail "sluice $sub: no synopsis on the page" "a plain fence with a \`sluice $sub ...\` line"
      continue
    fi
    page_flags=$(awk -F'\t' -v s="$sub" '$1 == s && $2 != "" { print $2 }' "$tmp/synopsis.tsv" | sort -u)
    help=$(help_flags "$sub")
    out=$(cut -f1 <<<"$help" | sed '/^$/d' | sort -u)
    missing=$(comm -13 <(echo "$page_flags") <(echo "$out") | sed '/^$/d' | tr '\n' ' ')
    extra=$(comm -23 <(echo "$page_flags") <(echo "$out") | sed '/^$/d' | tr '\n' ' ')
    required=""
    while IFS=$'\t' read -r flag req; do
      [[ $req == 1 ]] && grep -qxF -- "$flag" <<<"$page_flags" || continue
      awk -F'\t' -v s="$sub" -v f="$flag" '$1 == s && $2 == f && $3 == 0 { found = 1 } END { exit !found }' \
        "$tmp/synopsis.tsv" || required+="$flag "
    done <<<"$help"
    if [[ -z $missing && -z $extra && -z $required ]]; then
      pass "sluice $sub: the synopsis names the flags of --help"
    else
      [[ -z $missing ]] || fail "sluice $sub: ${missing% }" "in --help, not in the page's synopsis"
      [[ -z $extra ]] || fail "sluice $sub: ${extra% }" "in the page's synopsis, not a flag of sluice $sub"
      [[ -z $required ]] || fail "sluice $sub: ${required% }" "required (--help), but [optional] on the page"
    fi
  done
}

# ------------------------------------------------------------------ the checks, in page order
next_table=0
for i in "${!fence_line[@]}"; do
  while ((next_table < ${#fields_line[@]} && fields_after[next_table] <= i)); do
    check_fields "$next_table"; next_table=$((next_table + 1))
  done
  info=${fence_info[i]}
  if [[ ${info%% *} == sh ]]; then
    run_example "$i"
  elif grep -q '^\$ ' "$tmp/fence.$i"; then
    fail "$name:${fence_line[i]}" "a shell session in a \`\`\`${info} fence: make it \`\`\`sh to have it run"
  fi
done
while ((next_table < ${#fields_line[@]})); do
  check_fields "$next_table"; next_table=$((next_table + 1))
done
check_synopses
finish
