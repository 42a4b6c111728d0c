#!/usr/bin/env bash
# Writes sluice(1) in roff from the binary's own --help (the top level and every subcommand), so
# that the man page says what the binary says. Used by the build (make package installs it).
# Usage: scripts/manpage.sh path/to/sluice VERSION [OUT.1.gz]   (else roff on standard output)
set -euo pipefail
sluice=$1
version=$2
if [ $# -ge 3 ]; then
  "$0" "$sluice" "$version" | gzip -n -9 >"$3.tmp"
  mv "$3.tmp" "$3"
  exit 0
fi

# roff: a leading dot or quote would be a request; backslashes and dashes are escaped.
escape() { sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
# --help text with the binary's path as the program name.
help() { "$sluice" "$@" --help | sed "s|$sluice|sluice|g"; }

cat <<ROFF
.TH SLUICE 1 "" "sluice $version" "User Commands"
.SH NAME
sluice \\- a rate limiter for HTTP APIs
.SH SYNOPSIS
.B sluice
.I SUBCOMMAND
[\\fIOPTIONS\\fR]
.SH DESCRIPTION
sluice limits requests per key with the classic algorithms, several limits at once, plans and
rules reloaded without a restart. It runs as a forward-auth service, a reverse proxy and an Envoy
rate limit service (gRPC RLS v3), in memory or on Redis and Redis Cluster. Its rules are
envoyproxy/ratelimit's YAML with extensions. The documentation is in /usr/share/doc/sluice.
.SH OPTIONS
.nf
ROFF
help | escape
echo ".fi"
for sub in serve replay check-config explain; do
  echo ".SH SLUICE $(echo "$sub" | tr a-z A-Z | sed 's/-/\\-/g')"
  echo ".nf"
  help "$sub" | escape
  echo ".fi"
done
cat <<'ROFF'
.SH FILES
.TP
.I /etc/sluice/sluice.yaml
the settings of the packaged service; its rules are the files of /etc/sluice/rules
.SH SIGNALS
SIGHUP reloads the configuration; SIGTERM and SIGINT stop the service after the requests in
flight (bounded by http.shutdown_timeout).
.SH SEE ALSO
/usr/share/doc/sluice/README.md, /usr/share/doc/sluice/configuration.md,
/usr/share/doc/sluice/operations.md
ROFF
