#!/usr/bin/env python3
"""The manifests as `kubectl kustomize deploy/k8s` renders them (what
`kubectl apply -k` would send), checked without an API server:

- kubectl parses every object client-side (`kubectl label --local
  --dry-run=client -f -`; `kubectl apply --dry-run=client` needs a server);
- the replicas are a StatefulSet (no Deployment): its serviceName is the
  rendered headless Service, and a volumeClaimTemplate (ReadWriteOnce, 1Gi,
  the cluster's default class) is mounted at the directory of the config's
  [store] path, so each replica keeps its own durable jobs (issue 17);
- the generated ConfigMap (hash-suffixed name) is the one the StatefulSet
  mounts, and holds tpoold.toml;
- every object carries the kustomization's common label;
- Services and the PDB select the pod template's labels, their target ports
  are ports the container names; the headless Service is headless;
- the HPA scales the StatefulSet, minReplicas <= its replicas <=
  maxReplicas, with a metric; the PDB allows at most one disruption or keeps
  a minimum below the replicas;
- the ServiceMonitor selects a Service and scrapes a port that Service names,
  at /metrics.

usage: check_rendered_k8s.py [--rendered FILE] [--kubectl PATH]
Exits 77 (ctest SKIP), saying so, when kubectl is not installed.
"""

import argparse
import pathlib
import shutil
import subprocess
import sys
import tomllib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "unit/deploy"))
from deploy_facts import ROOT, Checker  # noqa: E402

try:
    import yaml
except ImportError:
    sys.exit("check_rendered_k8s.py needs PyYAML: scripts/install-deps.sh test installs python3-yaml")

PART_OF = ("app.kubernetes.io/part-of", "tpoold")
SKIP = 77


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rendered", help="the rendered manifests (default: render deploy/k8s)")
    ap.add_argument("--kubectl", default="kubectl")
    args = ap.parse_args()
    c = Checker("rendered deploy/k8s")
    if shutil.which(args.kubectl) is None:
        print(f"SKIP: {args.kubectl} is not installed: it renders deploy/k8s (kubectl kustomize) "
              "and parses the objects; install kubectl to run this check")
        return SKIP
    if args.rendered:
        text = pathlib.Path(args.rendered).read_text()
    else:
        r = subprocess.run([args.kubectl, "kustomize", str(ROOT / "deploy/k8s")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL: kubectl kustomize deploy/k8s: {r.stderr}")
            return 1
        text = r.stdout
    r = subprocess.run([args.kubectl, "label", "--local", "--dry-run=client", "-f", "-",
                        "tpoold.test/checked=yes", "-o", "name"],
                       input=text, capture_output=True, text=True)
    c.check(r.returncode == 0, f"kubectl does not parse the rendered objects: {r.stderr}")
    docs = [d for d in yaml.safe_load_all(text) if d]
    parsed = r.stdout.split()
    c.check(len(parsed) == len(docs), f"kubectl parsed {len(parsed)} objects of {len(docs)}")
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)
        name = d.get("metadata", {}).get("name")
        c.check(d.get("apiVersion") and name, f"an object without apiVersion or name: {d}")
        labels = d.get("metadata", {}).get("labels", {})
        c.check(labels.get(PART_OF[0]) == PART_OF[1],
                f"{d.get('kind')}/{name} lacks the label {PART_OF[0]}={PART_OF[1]}")
    for kind in ("ConfigMap", "StatefulSet", "Service", "PodDisruptionBudget",
                 "HorizontalPodAutoscaler", "ServiceMonitor"):
        c.check(kind in by_kind, f"no {kind} rendered")
    c.check("Deployment" not in by_kind, "a Deployment is rendered: the replicas are a "
                                         "StatefulSet, each with its own store volume")
    c.check(len(by_kind.get("StatefulSet", [])) == 1,
            f"{len(by_kind.get('StatefulSet', []))} StatefulSets rendered, not 1")
    if c.failures:
        return c.finish()

    sts = by_kind["StatefulSet"][0]
    pod = sts["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    c.check(matches(sts["spec"]["selector"]["matchLabels"], pod_labels),
            "the StatefulSet's selector does not match its pod template")
    container = pod["spec"]["containers"][0]
    port_names = {p["name"]: p["containerPort"] for p in container.get("ports", [])}

    # The generated config map: hash-suffixed, mounted by the StatefulSet.
    config_maps = {m["metadata"]["name"]: m for m in by_kind["ConfigMap"]}
    mounted = [v["configMap"]["name"] for v in pod["spec"].get("volumes", []) if "configMap" in v]
    for name in mounted:
        c.check(name in config_maps, f"the StatefulSet mounts ConfigMap {name}, not rendered")
    gen = [n for n in mounted if n.startswith("tpoold-config-")]
    c.check(len(gen) == 1, f"the StatefulSet mounts {mounted}: expected the generated "
                           "tpoold-config-<hash>")
    config = {}
    if gen and gen[0] in config_maps:
        c.check("tpoold.toml" in config_maps[gen[0]].get("data", {}),
                f"ConfigMap {gen[0]} has no tpoold.toml")
        config = tomllib.loads(config_maps[gen[0]].get("data", {}).get("tpoold.toml", ""))

    # Each replica's durable store: the claim template mounted where the
    # rendered config's [store] path is.
    store_path = config.get("store", {}).get("path", "")
    c.check(store_path.startswith("/"), f"the rendered config's [store] path is {store_path!r}: "
                                        "the replicas keep no durable jobs")
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    claims = {t["metadata"]["name"]: t for t in sts["spec"].get("volumeClaimTemplates", [])}
    claim = claims.get(mounts.get(store_path.rsplit("/", 1)[0]))
    c.check(claim is not None, f"no volumeClaimTemplate is mounted at the directory of [store] "
                               f"path {store_path!r} (claims {sorted(claims)}, mounts {mounts})")
    if claim is not None:
        cs = claim["spec"]
        c.check(cs.get("accessModes") == ["ReadWriteOnce"] and
                cs.get("resources", {}).get("requests", {}).get("storage") == "1Gi" and
                "storageClassName" not in cs,
                f"the store's claim template is {cs}, not ReadWriteOnce, 1Gi, default class")
    c.check(not any(v["name"] in claims for v in pod["spec"].get("volumes", [])),
            "a pod volume shadows a volumeClaimTemplate of the same name")

    services = {s["metadata"]["name"]: s for s in by_kind["Service"]}
    governing = services.get(sts["spec"].get("serviceName"))
    c.check(governing is not None and governing["spec"].get("clusterIP") == "None",
            f"the StatefulSet's serviceName {sts['spec'].get('serviceName')!r} is not a rendered "
            "headless Service (the pods' DNS names come from it)")
    for name, s in services.items():
        c.check(matches(s["spec"].get("selector"), pod_labels),
                f"Service {name} does not select the pods")
        for p in s["spec"].get("ports", []):
            t = p.get("targetPort", p.get("port"))
            c.check(t in port_names or t in port_names.values(),
                    f"Service {name} port {p.get('name')} targets {t}, which the container "
                    f"does not expose ({port_names})")
    headless = [s for s in services.values() if s["spec"].get("clusterIP") == "None"]
    c.check(len(headless) == 1, "no headless Service (DNS with one record per replica, for "
                                "clients that balance themselves)")

    pdb = by_kind["PodDisruptionBudget"][0]["spec"]
    c.check(matches(pdb.get("selector", {}).get("matchLabels"), pod_labels),
            "the PDB does not select the pods")
    replicas = sts["spec"].get("replicas", 1)
    c.check(("maxUnavailable" in pdb) != ("minAvailable" in pdb),
            "the PDB needs exactly one of maxUnavailable and minAvailable")
    if "minAvailable" in pdb and isinstance(pdb["minAvailable"], int):
        c.check(pdb["minAvailable"] < replicas, f"PDB minAvailable {pdb['minAvailable']} >= "
                                                f"replicas {replicas}: no drain could proceed")

    hpa = by_kind["HorizontalPodAutoscaler"][0]["spec"]
    ref = hpa.get("scaleTargetRef", {})
    c.check(ref.get("kind") == "StatefulSet" and ref.get("name") == sts["metadata"]["name"],
            f"the HPA scales {ref}, not StatefulSet {sts['metadata']['name']}")
    c.check(hpa.get("minReplicas", 1) <= replicas <= hpa.get("maxReplicas", 0),
            f"replicas {replicas} outside the HPA's [{hpa.get('minReplicas')}, "
            f"{hpa.get('maxReplicas')}]")
    c.check(bool(hpa.get("metrics")), "the HPA has no metrics")

    for sm in by_kind["ServiceMonitor"]:
        sel = sm["spec"].get("selector", {}).get("matchLabels")
        chosen = [s for s in services.values() if matches(sel, s["metadata"].get("labels", {}))]
        c.check(bool(chosen), f"ServiceMonitor {sm['metadata']['name']} selects no Service")
        for ep in sm["spec"].get("endpoints", []):
            c.check(ep.get("path", "/metrics") == "/metrics", f"ServiceMonitor scrapes {ep.get('path')}")
            c.check(any(ep.get("port") in [p.get("name") for p in s["spec"]["ports"]] for s in chosen),
                    f"ServiceMonitor scrapes port {ep.get('port')}, which no selected Service names")
    # The NetworkPolicy's named ports must be the container's, or it admits
    # nothing (a name that resolves to no port matches no traffic).
    ctr_ports = {p["name"] for ctr in sts["spec"]["template"]["spec"]["containers"]
                 for p in ctr.get("ports", [])}
    for np in by_kind.get("NetworkPolicy", []):
        c.check(matches(np["spec"]["podSelector"].get("matchLabels"), pod_labels),
                f"NetworkPolicy {np['metadata']['name']} does not select the tpoold pods")
        for rule in np["spec"].get("ingress", []):
            for p in rule.get("ports", []):
                c.check(p.get("port") in ctr_ports, f"NetworkPolicy {np['metadata']['name']} "
                        f"admits port {p.get('port')}, which the container does not name")
    print(f"rendered deploy/k8s: {len(docs)} objects ({', '.join(sorted(by_kind))}); "
          "kubectl parses them client-side")
    return c.finish()


if __name__ == "__main__":
    sys.exit(main())
