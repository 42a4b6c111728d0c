#!/usr/bin/env bash
# Checks the Kubernetes manifests (deploy/kubernetes, and its Redis variant deploy/kubernetes-redis)
# as `kubectl kustomize` renders them:
#
#   SLUICE=build/release/sluice bash tests/kubernetes_manifests_test.sh [REPO_ROOT]
#   SLUICE=build/release/sluice bash tests/kubernetes_manifests_test.sh --planted [REPO_ROOT]
#
# For each of the two: the kustomization uses only the fields that kubectl 1.20's kustomize
# (v2.0.3, Debian 12's kubernetes-client) knows; it renders; the Deployment runs the image
# localhost/sluice:latest, not pulled when present; its probes ask /readyz and /healthz on the
# container port that serves the admin API; the settings' listen, grpc.listen and admin.listen
# are on every address and on the ports the container declares; it runs as uid 65534, non-root,
# with a read-only root filesystem, no privilege escalation, no capabilities and the runtime's
# seccomp profile; it has CPU and memory requests and limits; the Deployment's, the Service's and
# the PodDisruptionBudget's selectors match the pod's labels; every Service port targets a
# container port that exists; the ConfigMaps are mounted as directories (never subPath, which
# the kubelet never updates), the --config file in the settings' and the settings' `rules:` a
# whole ConfigMap directory; the Prometheus scrape annotations name the admin port and
# /metrics. Then the ConfigMaps and the admin token's Secret (a made-up token) are written out
# where the pod mounts them and `sluice check-config` must accept the --config file; and the
# base's is served (`sluice serve` on loopback ports): /readyz, /healthz and /metrics answer 200
# on its admin port, and a new version of its rules ConfigMap, swapped in as the kubelet swaps it
# (`..data`), is reloaded in place. Also: the base's rules are still the embedded default's.
#
# --planted checks these checks: on a copy of deploy/ with one fault planted at a time (a probe
# path, a subPath, uid 0, a settings port the container does not declare, a broken rule, a PDB
# that selects no pod, a kustomize field newer than v2.0.3), the check that must notice it fails.
#
# KUBECTL names the kubectl (default: the one on the PATH); prints `N passed, M failed`.

set -uo pipefail

planted=0
if [[ ${1:-} == --planted ]]; then planted=1; shift; fi
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
sluice=${SLUICE:-$root/build/release/sluice}
kubectl=${KUBECTL:-kubectl}
source "$(dirname "$0")/lib.sh"  # pass, fail, check, finish, start; $tmp, removed on exit
need_tools "$kubectl" python3 curl
if ! python3 -c 'import yaml' 2>/dev/null; then
  echo "python3's yaml module is missing (scripts/bootstrap.sh installs python3-yaml)"
  echo "0 passed, 1 failed"
  exit 1
fi

# The checks of one rendering, written by python as NAME<TAB>EXPECTED<TAB>ACTUAL lines (then
# `check`ed), and `config<TAB>PATH`: the --config file, whose ConfigMaps and Secrets are written
# out under OUT as the pod mounts them.
inspect() {  # inspect RENDERED KUSTOMIZATION OUT BACKEND
  python3 - "$@" <<'PY'
import os, posixpath, sys, yaml

rendered, kustomization, out, backend = sys.argv[1:5]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
results = []

def say(name, expected, actual):
    clean = lambda v: " ".join(str(v).split())
    results.append((name, clean(expected), clean(actual)))

def of_kind(kind):
    return [d for d in docs if d.get("kind") == kind]

# Fields of kustomize v2.0.3 (kubectl 1.20) that these manifests may use.
allowed = {"resources", "bases", "configMapGenerator", "secretGenerator", "generatorOptions",
           "images", "namespace", "commonLabels", "commonAnnotations"}
k = yaml.safe_load(open(kustomization)) or {}
say("kustomization: fields kustomize v2.0.3 knows", "", " ".join(sorted(set(k) - allowed)))

deployments, services = of_kind("Deployment"), of_kind("Service")
pdbs = of_kind("PodDisruptionBudget")
say("one Deployment, one Service, one PodDisruptionBudget", "1 1 1",
    f"{len(deployments)} {len(services)} {len(pdbs)}")
if not deployments:
    sys.exit(print("\n".join("\t".join(r) for r in results)))
dep = deployments[0]
pod = dep["spec"]["template"]
spec = pod["spec"]
labels = pod["metadata"].get("labels") or {}
c = spec["containers"][0]
say("the image", "localhost/sluice:latest", c.get("image"))
say("the image is not pulled when present", "IfNotPresent", c.get("imagePullPolicy"))

ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
say("container ports named http, grpc, admin", "admin grpc http", " ".join(sorted(ports)))
def port_number(port):  # a probe's or a Service's port: a number or a container port's name
    return port if isinstance(port, int) else ports.get(port)

# The settings file: --config names it, in a ConfigMap mounted as a directory.
args = list(c.get("command", [])) + list(c.get("args", []))
# The image (deploy/image) has no PATH to search: its binary by its path.
say("the command is the image's /bin/sluice", "/bin/sluice", args[0] if args else "")
config = args[args.index("--config") + 1] if "--config" in args[:-1] else None
volumes = {v["name"]: v for v in spec.get("volumes", [])}
configmaps = {m["metadata"]["name"]: m for m in of_kind("ConfigMap")}
mounts = c.get("volumeMounts", [])
def mount_of(path):
    for m in mounts:
        if path and (path + "/").startswith(m["mountPath"].rstrip("/") + "/"):
            return m
    return None
def configmap_of(mount):
    v = volumes.get(mount["name"], {}) if mount else {}
    return (v.get("configMap") or {}).get("name")

settings_mount = mount_of(config)
settings_map = configmap_of(settings_mount)
say("--config names a file of a ConfigMap mount", "yes",
    "yes" if settings_map in configmaps else f"--config {config}, mounted from {settings_map}")
settings = {}
if settings_map in configmaps:
    key = posixpath.relpath(config, settings_mount["mountPath"])
    settings = yaml.safe_load(configmaps[settings_map].get("data", {}).get(key, "")) or {}
say("settings backend", backend, settings.get("backend"))
rules = settings.get("rules", "")
rules_dir = posixpath.normpath(posixpath.join(posixpath.dirname(config or "/"), rules))
rules_mount = mount_of(rules_dir)
say("the settings' rules: is a whole ConfigMap mount", rules_dir,
    rules_mount["mountPath"].rstrip("/") if configmap_of(rules_mount) in configmaps else "none")
for m in mounts:
    v = volumes.get(m["name"], {})
    if "configMap" in v or "secret" in v:
        say(f"volume {m['name']} mounted as a directory (no subPath)", "", m.get("subPath", ""))

# Listeners: on every address, on the container's ports.
def listen(value):
    host, _, port = str(value).rpartition(":")
    return host, int(port) if port.isdigit() else None
for what, value, port in (("listen", settings.get("listen"), "http"),
                          ("grpc.listen", (settings.get("grpc") or {}).get("listen"), "grpc"),
                          ("admin.listen", (settings.get("admin") or {}).get("listen"), "admin")):
    host, number = listen(value)
    say(f"settings {what} on the container port {port}", f"0.0.0.0:{ports.get(port)}",
        f"{host}:{number}")

# Probes: the admin port's /readyz and /healthz.
for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
    get = (c.get(probe) or {}).get("httpGet") or {}
    say(f"{probe} path", path, get.get("path"))
    say(f"{probe} port: the admin port", ports.get("admin"), port_number(get.get("port")))

# Security: the container's, else the pod's.
psc, csc = spec.get("securityContext") or {}, c.get("securityContext") or {}
def effective(field):
    return csc.get(field, psc.get(field))
say("runAsNonRoot", True, effective("runAsNonRoot"))
say("runAsUser", 65534, effective("runAsUser"))
say("readOnlyRootFilesystem", True, csc.get("readOnlyRootFilesystem"))
say("allowPrivilegeEscalation", False, csc.get("allowPrivilegeEscalation"))
say("capabilities dropped", "['ALL']", (csc.get("capabilities") or {}).get("drop"))
say("seccompProfile", "RuntimeDefault", (effective("seccompProfile") or {}).get("type"))
res = c.get("resources") or {}
say("resources: requests and limits of cpu and memory", "cpu memory cpu memory",
    " ".join(sorted(res.get("requests") or {}) + sorted(res.get("limits") or {})))

# Selectors match the pod's labels.
def selects(selector):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())
say("Deployment selector matches the pod labels", True,
    selects(dep["spec"]["selector"].get("matchLabels")))
for pdb in pdbs:
    say("PodDisruptionBudget selector matches the pod labels", True,
        selects((pdb["spec"].get("selector") or {}).get("matchLabels")))
for svc in services:
    say("Service selector matches the pod labels", True, selects(svc["spec"].get("selector")))
    names = []
    for p in svc["spec"].get("ports", []):
        names.append(p.get("name"))
        target = p.get("targetPort", p.get("port"))
        say(f"Service port {p.get('name')} targets a container port", "yes",
            "yes" if port_number(target) in ports.values() else f"none is {target}")
    say("Service ports", "grpc http metrics", " ".join(sorted(names)))

# Prometheus: the pod's scrape annotations name the admin port and /metrics.
notes = pod["metadata"].get("annotations") or {}
say("prometheus.io/scrape", "true", notes.get("prometheus.io/scrape"))
say("prometheus.io/port: the admin port", str(ports.get("admin")), notes.get("prometheus.io/port"))
say("prometheus.io/path", "/metrics", notes.get("prometheus.io/path"))

# Write out what the pod mounts: ConfigMaps as they are, a Secret's items as a made-up token; laid
# out as the kubelet lays out such a volume, each name a link through `..data` to `..v1/`.
for m in mounts:
    v = volumes.get(m["name"], {})
    where = out + m["mountPath"]
    files = {}
    if "configMap" in v:
        data = configmaps.get(v["configMap"]["name"], {}).get("data") or {}
        items = v["configMap"].get("items")
        files = {i["path"]: data.get(i["key"], "") for i in items} if items else data
    elif "secret" in v:
        files = {i["path"]: "a-token-for-the-test\n" for i in v["secret"].get("items", [])}
    for name, text in files.items():
        path = posixpath.join(where, "..v1", name)
        os.makedirs(posixpath.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        top = name.split("/")[0]
        if not os.path.lexists(posixpath.join(where, top)):
            os.symlink(posixpath.join("..data", top), posixpath.join(where, top))
    if files:
        os.symlink("..v1", posixpath.join(where, "..data"))
for r in results:
    print("\t".join(r))
print(f"config\t{config}")
PY
}

# Renders kustomization DIR under NAME and checks it all, its settings' backend BACKEND; with
# SERVE=1, also serves its configuration.
check_tree() {  # check_tree NAME DIR BACKEND
  local name=$1 dir=$2 backend=$3 rendered err config out line what expected actual
  rendered=$tmp/$name.yaml err=$tmp/$name.err out=$tmp/$name.root
  rm -rf "$out"
  if ! "$kubectl" kustomize "$dir" >"$rendered" 2>"$err"; then
    fail "$name: kubectl kustomize" "it failed" "$(cat "$err")"
    return
  fi
  pass "$name: kubectl kustomize"
  config=
  while IFS=$'\t' read -r what expected actual; do
    if [[ $what == config ]]; then config=$expected; continue; fi
    check "$name: $what" "$expected" "$actual"
  done < <(inspect "$rendered" "$dir/kustomization.yaml" "$out" "$backend" 2>&1 ||
    printf 'the checks\tran\tfailed\n')
  [[ -n $config && -e $out$config ]] || { fail "$name: check-config" "no --config file"; return; }
  line=$("$sluice" check-config "$out$config" 2>&1)
  if [[ $line == ok:* ]]; then
    pass "$name: sluice check-config $config"
  else
    fail "$name: sluice check-config $config" "it refused" "$line"
  fi
  ((${SERVE:-0})) || return 0
  # The base's configuration served (on loopback ports): the probes' and Prometheus's paths.
  if ! start "$name-serve" --config "$out$config" --listen 127.0.0.1:0 --admin 127.0.0.1:0 \
    --grpc 127.0.0.1:0; then
    fail "$name: sluice serve" "it did not start" "$(cat "$tmp/$name-serve.err")"
    return
  fi
  for what in /readyz /healthz /metrics; do
    check "$name: served, GET $what" 200 \
      "$(curl -s -o /dev/null -w '%{http_code}' "http://$ADMIN$what")"
  done
  # An edited rules ConfigMap, published as the kubelet does (a new ..v2, ..data renamed over):
  # reloaded in place. The per-ip limit goes from a burst of 200 to one of 50.
  local rules=$out/etc/sluice/rules
  local per_ip="http://$ADMIN/v1/limits?domain=default&descriptors=remote_address=10.0.0.1"
  check "$name: served, the per-ip limit" '"limit":200' \
    "$(grep -o '"limit":[0-9]*' <<<"$(curl -s "$per_ip")")"
  cp -r "$rules/..v1" "$rules/..v2"
  sed -i 's/\(name: per-ip, requests: \)100\(.*burst: \)200/\150\250/' "$rules/..v2/default.yaml"
  ln -s ..v2 "$rules/..data_tmp" && mv -T "$rules/..data_tmp" "$rules/..data" &&
    rm -rf "$rules/..v1"
  for _ in $(seq 50); do
    [[ $(curl -s "$per_ip") == *'"limit":50,'* ]] && break
    sleep 0.1
  done
  check "$name: a ..data swap of the rules ConfigMap, reloaded: the per-ip limit" '"limit":50' \
    "$(grep -o '"limit":[0-9]*' <<<"$(curl -s "$per_ip")")"
  stop
}

# The rules the base ships are the embedded default's (src/cli/default_config.h), which its
# README promises; a kustomization reads no file above its folder, hence the copy. Compared
# without their opening comments.
same_as_default() {
  python3 - "$root/src/cli/default_config.h" "$root/deploy/kubernetes/rules/default.yaml" <<'PY'
import sys
header, rules = (open(f).read() for f in sys.argv[1:3])
embedded = header.split('R"yaml(', 1)[1].split(')yaml"', 1)[0]
def body(text):  # without the comment lines it opens with
    lines = text.split("\n")
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "\n".join(lines)
print("same" if body(embedded) == body(rules) else "different")
PY
}

if ((planted == 0)); then
  check "deploy/kubernetes/rules/default.yaml: the embedded default's rules" same \
    "$(same_as_default 2>&1)"
  SERVE=1 check_tree kubernetes "$root/deploy/kubernetes" memory
  check_tree kubernetes-redis "$root/deploy/kubernetes-redis" redis
  finish
  exit
fi

# --planted: each fault on a fresh copy of deploy/; the named check (an extended regular
# expression) must fail.
plant() {  # plant WHAT FILE SED-EXPRESSION CHECK
  local what=$1 file=$2 expr=$3 must=$4 copy=$tmp/planted output
  rm -rf "$copy" && mkdir -p "$copy" && cp -r "$root/deploy/." "$copy/"
  sed -i "$expr" "$copy/$file"
  if cmp -s "$root/deploy/$file" "$copy/$file"; then
    fail "planted $what" "the plant changed nothing in $file"
    return
  fi
  output=$(check_tree kubernetes "$copy/kubernetes" memory)
  if grep -Eq "^FAIL kubernetes: ($must)" <<<"$output"; then
    pass "planted $what: '$must' fails"
  else
    fail "planted $what" "'$must' did not fail" "$output"
  fi
}
plant "readiness probe path" kubernetes/deployment.yaml 's|path: /readyz|path: /ready|' \
  "readinessProbe path"
plant "subPath" kubernetes/deployment.yaml \
  's|^\( *\)mountPath: /etc/sluice/rules$|&\n\1subPath: default.yaml|' \
  "volume rules mounted as a directory"
plant "root" kubernetes/deployment.yaml 's|runAsUser: 65534|runAsUser: 0|' "runAsUser"
plant "admin port" kubernetes/sluice.yaml 's|listen: 0.0.0.0:9091|listen: 0.0.0.0:9092|' \
  "settings admin.listen"
plant "broken rule" kubernetes/rules/default.yaml \
  '0,/requests: 10,/s|requests: 10,|requests: ten,|' "sluice check-config"
plant "PDB selecting nothing" kubernetes/pdb.yaml '$s|name: sluice|name: sluicE|' \
  "PodDisruptionBudget selector"
plant "kustomize labels:" kubernetes/kustomization.yaml \
  '$a labels:\n  - pairs: {app.kubernetes.io/part-of: sluice}' \
  "kustomization: fields|kubectl kustomize"  # (kubectl 1.20 refuses to render it at all)
finish
