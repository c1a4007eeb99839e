#!/usr/bin/env python3
"""Parses every manifest in deploy/k8s and checks that the probes, ports,
signals and timeouts agree with the daemon's config (deploy_facts.py) and
with each other (selectors, named ports, the HPA's metric and its adapter
rule, the image's user), and that each replica owns its durable store: a
StatefulSet whose volumeClaimTemplate is mounted where [store] path points
(issue 17).
"""

import argparse
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from deploy_facts import ROOT, Checker, Facts, tomllib  # noqa: E402

try:
    import yaml
except ImportError:
    sys.exit("check_k8s.py needs PyYAML: scripts/install-deps.sh test installs python3-yaml")

K8S = ROOT / "deploy/k8s"
# Margin between the daemon's longest stop and the kubelet's SIGKILL, for the
# preStop exec and the process exit. Picked by hand.
STOP_MARGIN_S = 10
# The pods read their config from the ConfigMap mounted as a directory here
# (deployment.yaml says why not a subPath mount over the image's config).
K8S_CONFIG_DIR = "/etc/tpoold/k8s"
K8S_CONFIG = K8S_CONFIG_DIR + "/tpoold.toml"
TLS_DIR = "/etc/tpoold/tls"  # the Secret tpoold-tls (cert-manager: tls.crt, tls.key, ca.crt)
AUTH_DIR = "/etc/tpoold/auth"  # the Secret tpoold-auth (key tokens: the token file)
STATE_DIR = "/var/lib/tpoold"  # the volumeClaimTemplate state: [store] path's directory


def load_all():
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path.name, doc))
    return docs


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpoold", help="the built daemon: it must accept the pods' config")
    args = ap.parse_args()
    facts = Facts()
    c = Checker("kubernetes manifests")
    docs = load_all()
    kinds = {}
    for name, d in docs:
        c.check("kind" in d and "apiVersion" in d, f"{name}: a document without kind/apiVersion")
        kinds.setdefault(d.get("kind"), []).append(d)
    for kind in ("StatefulSet", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler",
                 "ServiceMonitor", "ConfigMap", "Kustomization", "NetworkPolicy", "Certificate"):
        c.check(kind in kinds, f"no {kind} in deploy/k8s")
    # Each replica owns a journal (issue 17): a Deployment's pods would share
    # no volume of their own and change names at every rollout.
    c.check("Deployment" not in kinds, "deploy/k8s has a Deployment: the replicas are a "
                                       "StatefulSet, each with its own store volume")
    if c.failures:
        return c.finish()

    # ---- the config the pods run with ------------------------------------
    kust = kinds["Kustomization"][0]
    listed = set(kust.get("resources", []))
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    c.check(listed == on_disk, f"kustomization.yaml resources {sorted(listed)} differ from the "
                               f"manifests on disk {sorted(on_disk)}")
    gen = {g["name"]: g for g in kust.get("configMapGenerator", [])}
    c.check("tpoold-config" in gen and "tpoold.toml" in gen["tpoold-config"].get("files", []),
            "kustomization.yaml does not generate tpoold-config from tpoold.toml")
    cfg = tomllib.loads((K8S / "tpoold.toml").read_text())
    for section, table in cfg.items():
        for key in table:
            known = f"{section}.{key}" in facts.defaults or section == "plugins"
            c.check(known, f"deploy/k8s/tpoold.toml sets {section}.{key}, which the daemon "
                           "(daemon/server/src/config.h) does not have")

    def get(dotted):
        s, k = dotted.split(".", 1)
        return cfg.get(s, {}).get(k, facts.defaults.get(dotted))

    grpc_host, grpc_port = get("server.listen").rsplit(":", 1)
    metrics_host, metrics_port = get("metrics.listen").rsplit(":", 1)
    grpc_port, metrics_port = int(grpc_port), int(metrics_port)
    c.check(grpc_host == "0.0.0.0", f"server.listen is {get('server.listen')}: a pod must listen "
                                    "on 0.0.0.0 for probes and Services to reach it")
    c.check(metrics_host == "0.0.0.0", f"metrics.listen is {get('metrics.listen')}, not 0.0.0.0")
    c.check(grpc_port == facts.grpc_port and metrics_port == facts.metrics_port,
            f"the pod's ports {grpc_port}/{metrics_port} differ from the daemon's "
            f"{facts.grpc_port}/{facts.metrics_port}")
    stop_s = (int(get("server.drain_timeout_ms")) + int(get("server.cancel_grace_ms"))) / 1000
    c.check(int(get("pool.max_threads")) != 0,
            "pool.max_threads is 0 (one per core of the node, not of the pod); set it to the "
            "container's CPU request")
    c.check(facts.user_plugin_dir in get("plugins.dirs"),
            f"plugins.dirs does not include {facts.user_plugin_dir}, where operators mount plugins")

    # ---- the StatefulSet --------------------------------------------------
    dep = kinds["StatefulSet"][0]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    spec = pod["spec"]
    c.check(matches(dep["spec"]["selector"]["matchLabels"], labels),
            "the StatefulSet's selector does not match its pod labels")
    ctr = next((x for x in spec["containers"] if x["name"] == "tpoold"), None)
    c.check(ctr is not None, "no container named tpoold")
    if ctr is None:
        return c.finish()
    ports = {p["name"]: p["containerPort"] for p in ctr.get("ports", [])}
    c.check(ports.get("grpc") == grpc_port, f"container port grpc is {ports.get('grpc')}, "
                                            f"the daemon listens on {grpc_port}")
    c.check(ports.get("metrics") == metrics_port, f"container port metrics is "
                                                  f"{ports.get('metrics')}, not {metrics_port}")
    ctr_args = ctr.get("args", [])
    c.check(ctr_args[:2] == ["--config", K8S_CONFIG],
            f"the container's args {ctr_args} do not pass --config {K8S_CONFIG}")
    # Every $(VAR) in args must be an env var of the container, or Kubernetes
    # passes the text through unexpanded.
    env_names = {e.get("name") for e in ctr.get("env", [])}
    for a in ctr_args:
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
            c.check(var in env_names, f"the container's args use $({var}) but its env has no {var}")
    # The job port serves TLS, which the kubelet's grpc probes cannot speak:
    # each probe is `tpoolctl --address 127.0.0.1:PORT --tls-ca CA ... health`.
    for probe_name in ("readinessProbe", "livenessProbe", "startupProbe"):
        probe = ctr.get(probe_name, {})
        cmd = probe.get("exec", {}).get("command", [])
        flag = lambda f: cmd[cmd.index(f) + 1] if f in cmd[:-1] else None  # noqa: E731
        c.check(cmd[:1] == ["tpoolctl"] and cmd[-1:] == ["health"]
                and flag("--address") == f"127.0.0.1:{grpc_port}"
                and flag("--tls-ca") == f"{TLS_DIR}/ca.crt",
                f"{probe_name} is not `tpoolctl --address 127.0.0.1:{grpc_port} --tls-ca "
                f"{TLS_DIR}/ca.crt ... health` (it is {probe})")
        c.check("grpc" not in probe, f"{probe_name} is a kubelet grpc probe: it has no TLS")
    live = ctr.get("livenessProbe", {})
    patience = live.get("failureThreshold", 3) * live.get("periodSeconds", 10)
    c.check(patience > stop_s, f"livenessProbe gives up after {patience}s, shorter than a drain "
                               f"({stop_s}s): health is NOT_SERVING while draining, so the "
                               "kubelet would restart a draining pod")
    grace = spec.get("terminationGracePeriodSeconds", 30)
    c.check(grace >= stop_s + STOP_MARGIN_S,
            f"terminationGracePeriodSeconds={grace} is not above drain_timeout_ms + "
            f"cancel_grace_ms ({stop_s}s) + {STOP_MARGIN_S}s")
    pre = ctr.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    admin = get("server.admin_listen")
    c.check(pre == ["tpoolctl", "--admin-address", admin, "drain"],
            f"preStop is {pre}, not `tpoolctl --admin-address {admin} drain` (the admin socket; --address is the job port)")
    sc = ctr.get("securityContext", {})
    psc = spec.get("securityContext", {})
    c.check(sc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem is not true")
    c.check(sc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation is not false")
    c.check("ALL" in sc.get("capabilities", {}).get("drop", []), "capabilities do not drop ALL")
    run_as = sc.get("runAsUser", psc.get("runAsUser"))
    c.check((sc.get("runAsNonRoot") or psc.get("runAsNonRoot")) is True and run_as not in
            (None, 0), f"the pod is not non-root (runAsNonRoot, runAsUser={run_as})")
    docker_uid = dockerfile_uid()
    c.check(docker_uid is None or run_as == docker_uid,
            f"runAsUser={run_as} differs from the Dockerfile's USER {docker_uid}")
    res = ctr.get("resources", {})
    c.check(res.get("requests", {}).get("cpu") and res.get("requests", {}).get("memory")
            and res.get("limits", {}).get("memory"), "resources lack cpu/memory requests or a "
                                                     "memory limit")
    req_cpu = str(res.get("requests", {}).get("cpu", "0"))
    c.check(req_cpu.isdigit() and int(req_cpu) == int(get("pool.max_threads")),
            f"the CPU request ({req_cpu}) and pool.max_threads ({get('pool.max_threads')}) "
            "differ: size the pool to the CPUs the pod gets")
    mounts = {m["mountPath"]: m for m in ctr.get("volumeMounts", [])}
    c.check(K8S_CONFIG_DIR in mounts and "subPath" not in mounts[K8S_CONFIG_DIR],
            f"the ConfigMap is not mounted as a directory at {K8S_CONFIG_DIR}")
    c.check(facts.user_plugin_dir in mounts, f"nothing is mounted at {facts.user_plugin_dir}")
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    claims = {v["metadata"]["name"]: v for v in dep["spec"].get("volumeClaimTemplates", [])}
    for m in mounts.values():
        c.check(m["name"] in vols or m["name"] in claims,
                f"volumeMount {m['name']} has no volume or volumeClaimTemplate")
    for name in claims:
        c.check(name not in vols, f"{name} is both a volume and a volumeClaimTemplate")

    # The durable store (issue 17): [store] path in a volume of this replica
    # alone, kept across restarts, reschedules and scale-downs.
    store_path = str(get("store.path") or "")
    c.check(store_path == f"{STATE_DIR}/jobs.db",
            f"deploy/k8s/tpoold.toml: [store] path is {store_path!r}, not '{STATE_DIR}/jobs.db'")
    c.check(get("store.durable") is False,
            f"deploy/k8s/tpoold.toml: [store] durable is {get('store.durable')!r}: durable is "
            "opt-in per request or handler (false)")
    state_mount = mounts.get(store_path.rsplit("/", 1)[0], {})
    claim = claims.get(state_mount.get("name"))
    c.check(claim is not None, f"the store's directory {STATE_DIR} is not a volumeClaimTemplate "
                               f"of the StatefulSet (it is {state_mount or 'not mounted'})")
    c.check(state_mount.get("readOnly") is not True, f"{STATE_DIR} is mounted read-only")
    if claim is not None:
        cs = claim.get("spec", {})
        c.check(cs.get("accessModes") == ["ReadWriteOnce"],
                f"the state claim's accessModes are {cs.get('accessModes')}, not ReadWriteOnce "
                "(one node, one pod: SQLite's locks need a local file system)")
        c.check(cs.get("resources", {}).get("requests", {}).get("storage") == "1Gi",
                f"the state claim requests {cs.get('resources')}, not 1Gi")
        c.check("storageClassName" not in cs, "the state claim names a storageClassName: leave "
                                              "it to the cluster's default class")
    c.check(psc.get("fsGroup") == run_as, f"fsGroup is {psc.get('fsGroup')}, not {run_as}: the "
                                          "state volume would not be writable by the daemon")
    head_name = dep["spec"].get("serviceName")
    c.check(head_name == "tpoold-headless", f"the StatefulSet's serviceName is {head_name!r}, "
                                            "not the headless Service tpoold-headless")
    c.check(dep["spec"].get("updateStrategy", {}).get("type", "RollingUpdate") == "RollingUpdate",
            "the StatefulSet's updateStrategy is not RollingUpdate")
    c.check("strategy" not in dep["spec"], "the StatefulSet has a Deployment's `strategy`")
    retain = dep["spec"].get("persistentVolumeClaimRetentionPolicy", {})
    c.check(retain.get("whenScaled", "Retain") == "Retain" and
            retain.get("whenDeleted", "Retain") == "Retain",
            f"persistentVolumeClaimRetentionPolicy is {retain}: a scale-down or delete would "
            "remove volumes holding durable jobs")
    # The secure path (issue 16, item 5): TLS and tokens from Secrets, the
    # admin socket in an emptyDir of the pod.
    c.check(str(admin).startswith("unix:/"), f"server.admin_listen is {admin!r}: the admin API "
                                             "must be a Unix socket in the pod")
    sock_dir = str(admin).removeprefix("unix:").rsplit("/", 1)[0]
    c.check("emptyDir" in vols.get(mounts.get(sock_dir, {}).get("name"), {}),
            f"the admin socket's directory {sock_dir} is not an emptyDir of the pod")
    for key, mount, secret in (("tls.cert_file", TLS_DIR, "tpoold-tls"),
                               ("tls.key_file", TLS_DIR, "tpoold-tls"),
                               ("auth.token_file", AUTH_DIR, "tpoold-auth")):
        c.check(str(get(key)).startswith(mount + "/"), f"{key} = {get(key)!r} is not in {mount}")
        vol = vols.get(mounts.get(mount, {}).get("name"), {})
        c.check(vol.get("secret", {}).get("secretName") == secret,
                f"{mount} is not the Secret {secret} (it is {vol})")
        c.check(mounts.get(mount, {}).get("readOnly") is True, f"{mount} is not read-only")
    c.check(get("tls.cert_file") == f"{TLS_DIR}/tls.crt" and get("tls.key_file") ==
            f"{TLS_DIR}/tls.key", "tls.cert_file/key_file are not the kubernetes.io/tls "
                                  "Secret's tls.crt/tls.key (cert-manager's names)")
    c.check(get("metrics.tls") is True, "metrics.tls is not true: /metrics off loopback in "
                                        "plain HTTP")
    c.check(get("server.allow_insecure") is not True, "server.allow_insecure is true")
    cfg_vol = vols.get(mounts.get(K8S_CONFIG_DIR, {}).get("name"), {})
    c.check(cfg_vol.get("configMap", {}).get("name") == "tpoold-config",
            "the config mount does not come from the tpoold-config ConfigMap")

    # ---- Services, PDB, HPA, ServiceMonitor -------------------------------
    services = {s["metadata"]["name"]: s for s in kinds["Service"]}
    c.check({"tpoold", "tpoold-headless"} <= set(services),
            f"Services {sorted(services)}: need tpoold and tpoold-headless")
    for name, svc in services.items():
        c.check(matches(svc["spec"].get("selector"), labels),
                f"Service {name} does not select the tpoold pods")
        for p in svc["spec"]["ports"]:
            target = p.get("targetPort")
            c.check(target in ports or target in ports.values(),
                    f"Service {name} port {p['name']} targets {target}, not a container port")
            c.check(p["name"] != "grpc" or p["port"] == grpc_port,
                    f"Service {name} serves grpc on {p['port']}, not {grpc_port}")
    svc = services.get("tpoold", {"spec": {"ports": []}})
    c.check({p["name"] for p in svc["spec"]["ports"]} == {"grpc", "metrics"},
            "Service tpoold does not expose exactly grpc and metrics")
    head = services.get("tpoold-headless", {"spec": {}})
    c.check(head["spec"].get("clusterIP") == "None", "tpoold-headless is not headless")

    pdb = kinds["PodDisruptionBudget"][0]
    c.check(matches(pdb["spec"]["selector"]["matchLabels"], labels),
            "the PodDisruptionBudget does not select the tpoold pods")
    c.check(pdb["spec"].get("maxUnavailable") == 1 or "minAvailable" in pdb["spec"],
            "the PodDisruptionBudget sets no budget")

    hpa = kinds["HorizontalPodAutoscaler"][0]
    ref = hpa["spec"]["scaleTargetRef"]
    c.check(ref["kind"] == "StatefulSet" and ref["name"] == dep["metadata"]["name"],
            f"the HPA scales {ref}, not the tpoold StatefulSet")
    c.check(hpa["spec"]["minReplicas"] >= 2, "the HPA may scale below 2 replicas")
    pod_metrics = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"]
                   if m["type"] == "Pods"]
    adapter = next((d for d in kinds["ConfigMap"]
                    if d["metadata"]["name"] == "tpoold-prometheus-adapter-rules"), None)
    c.check(adapter is not None, "no prometheus-adapter rules ConfigMap")
    adapter_rules = yaml.safe_load(adapter["data"]["config.yaml"])["rules"] if adapter else []
    served = {r["name"]["as"]: r for r in adapter_rules}
    c.check(pod_metrics and all(m in served for m in pod_metrics),
            f"the HPA scales on {pod_metrics}; the adapter serves {sorted(served)}")
    for r in adapter_rules:
        series = re.match(r"(\w+)\{", r["seriesQuery"]).group(1)
        c.check(re.search(r["name"]["matches"], series) is not None,
                f"adapter rule name.matches {r['name']['matches']} does not match {series}")
        c.check(set(r["resources"]["overrides"]) == {"namespace", "pod"},
                "the adapter rule does not map namespace and pod")

    np = kinds["NetworkPolicy"][0]
    c.check(matches(np["spec"]["podSelector"]["matchLabels"], labels),
            "the NetworkPolicy does not select the tpoold pods")
    c.check("Ingress" in np["spec"].get("policyTypes", []), "the NetworkPolicy has no Ingress")
    allowed = {p.get("port") for r in np["spec"].get("ingress", []) for p in r.get("ports", [])}
    c.check(allowed == {"grpc", "metrics"}, f"the NetworkPolicy admits ports {allowed}, not "
                                            "exactly grpc and metrics")
    c.check(all(r.get("from") for r in np["spec"].get("ingress", [])),
            "a NetworkPolicy ingress rule admits every source")
    cert = kinds["Certificate"][0]
    c.check(cert["spec"].get("secretName") == "tpoold-tls" and
            "127.0.0.1" in cert["spec"].get("ipAddresses", []),
            "certificate.yaml does not write Secret tpoold-tls with IP 127.0.0.1 (the probes)")

    sm = kinds["ServiceMonitor"][0]
    c.check(all(e.get("scheme") == "https" and e.get("tlsConfig", {}).get("ca")
                for e in sm["spec"]["endpoints"]),
            "the ServiceMonitor does not scrape over https with the CA (metrics.tls)")
    c.check(matches(sm["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"]),
            "the ServiceMonitor does not select Service tpoold")
    c.check([e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"],
            "the ServiceMonitor does not scrape the named port metrics")

    if args.tpoold:
        # --check-config also checks that the plugin directories exist (the
        # image has them; an empty directory stands in for them here) and
        # reads the certificate and token files: the Secrets' files stand in
        # as a test certificate (scripts/gen-test-certs.sh) and a token line,
        # at the same names under a temporary directory.
        with tempfile.TemporaryDirectory() as tmp:
            t = pathlib.Path(tmp)
            r = subprocess.run([str(ROOT / "scripts/gen-test-certs.sh"), str(t / "certs")],
                               capture_output=True, text=True)
            c.check(r.returncode == 0, f"gen-test-certs.sh failed: {r.stderr}")
            (t / "tls").mkdir()
            (t / "auth").mkdir()
            for src, dst in (("server.pem", "tls.crt"), ("server.key", "tls.key"),
                             ("ca.pem", "ca.crt")):
                shutil.copy(t / "certs" / src, t / "tls" / dst)
            (t / "auth/tokens").write_text("probe:read:::\n")
            (t / "auth/tokens").chmod(0o600)
            text = (K8S / "tpoold.toml").read_text()
            text = text.replace(TLS_DIR + "/", f"{t}/tls/").replace(AUTH_DIR + "/", f"{t}/auth/")
            text = text.replace("unix:/run/tpoold/", f"unix:{t}/")
            (t / "state").mkdir(mode=0o700)
            text = text.replace(f'"{STATE_DIR}/', f'"{t}/state/')
            (t / "tpoold.toml").write_text(text)
            (t / "plugins").mkdir()
            r = subprocess.run([args.tpoold, "--check-config", str(t / "tpoold.toml"),
                                "--plugin-dir", str(t / "plugins")], capture_output=True, text=True)
        c.check(r.returncode == 0, "tpoold --check-config rejects deploy/k8s/tpoold.toml: "
                                   f"{r.stdout}{r.stderr}")
    return c.finish()


def dockerfile_uid():
    """The numeric USER of the Dockerfile's last stage, or None without one."""
    path = ROOT / "Dockerfile"
    if not path.exists():
        return None
    users = re.findall(r"^USER\s+(\d+)", path.read_text(), re.M)
    return int(users[-1]) if users else -1


if __name__ == "__main__":
    sys.exit(main())
