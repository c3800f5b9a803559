//! The deployment files in `deploy/` stay true to the code: every YAML file
//! parses, and every `colball-server` command line in the compose file, the
//! Kubernetes manifests and the Dockerfile is accepted by the real binary's
//! flag parser (a renamed or removed flag fails here). The local-cluster
//! script is run end to end by `.ci/run`.

use std::path::{Path, PathBuf};
use std::process::Command;

use yaml_rust2::{Yaml, YamlLoader};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn yaml_files() -> Vec<PathBuf> {
    let mut files = vec![
        deploy_dir().join("compose.yaml"),
        deploy_dir().join("compose.scale-out.yaml"),
    ];
    for entry in std::fs::read_dir(deploy_dir().join("k8s")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(path);
        }
    }
    files.sort();
    files
}

fn load(path: &Path) -> Vec<Yaml> {
    let text = std::fs::read_to_string(path).unwrap();
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether the real `colball-server` accepts these arguments.
fn accepted(args: &[String]) -> Result<(), String> {
    let out = Command::new(env!("CARGO_BIN_EXE_colball-server"))
        .args(args)
        .arg("--check-args")
        .output()
        .unwrap();
    if out.status.success() && out.stdout == b"ok\n" {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn strings(list: &Yaml) -> Vec<String> {
    list.as_vec()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// The scale-out overlay's manifests (several coordinators on
/// PostgreSQL, KEDA for the workers).
fn scale_out_files() -> Vec<PathBuf> {
    let dir = deploy_dir().join("k8s-scale-out");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    files
}

/// Every command line in the compose files and the manifests.
fn command_lines() -> Vec<(String, Vec<String>)> {
    let mut lines = Vec::new();
    for file in ["compose.yaml", "compose.scale-out.yaml"] {
        let compose = &load(&deploy_dir().join(file))[0];
        for (name, service) in compose["services"].as_hash().unwrap() {
            if !service["command"].is_badvalue() {
                lines.push((
                    format!("{file} {}", name.as_str().unwrap()),
                    strings(&service["command"]),
                ));
            }
        }
    }
    let manifests = yaml_files()
        .into_iter()
        .filter(|p| p.starts_with(deploy_dir().join("k8s")))
        .chain(scale_out_files());
    for path in manifests {
        for doc in load(&path) {
            if !matches!(doc["kind"].as_str(), Some("Deployment" | "StatefulSet")) {
                continue;
            }
            for container in doc["spec"]["template"]["spec"]["containers"]
                .as_vec()
                .unwrap()
            {
                lines.push((
                    format!("{} {}", path.display(), container["name"].as_str().unwrap()),
                    strings(&container["args"]),
                ));
            }
        }
    }
    let dockerfile = std::fs::read_to_string(deploy_dir().join("Dockerfile")).unwrap();
    let cmd = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("the Dockerfile has a CMD");
    lines.push(("Dockerfile CMD".into(), serde_json::from_str(cmd).unwrap()));
    lines
}

#[test]
fn every_yaml_file_parses() {
    let files = yaml_files();
    assert!(files.len() >= 4, "{files:?}");
    for path in files {
        assert!(!load(&path).is_empty(), "{} is empty", path.display());
    }
}

#[test]
fn every_command_line_is_accepted_by_the_real_cli() {
    let lines = command_lines();
    // compose: coordinator and worker, and two coordinators and a worker;
    // k8s: coordinator and worker, and the scale-out coordinator; CMD.
    assert!(lines.len() >= 9, "{lines:?}");
    for (place, args) in &lines {
        accepted(args).unwrap_or_else(|e| panic!("{place}: {args:?} is refused: {e}"));
    }
}

#[test]
fn the_check_catches_a_bad_flag() {
    let (_, mut args) = command_lines().into_iter().next().unwrap();
    args.push("--no-such-flag".into());
    assert!(accepted(&args).is_err());
}

#[test]
fn kubernetes_has_probes_autoscaling_and_a_matching_grace_period() {
    let docs: Vec<Yaml> = yaml_files().iter().flat_map(|p| load(p)).collect();
    let kind = |k: &'static str| docs.iter().filter(move |d| d["kind"].as_str() == Some(k));
    assert_eq!(kind("HorizontalPodAutoscaler").count(), 1);
    assert_eq!(kind("PodDisruptionBudget").count(), 1);
    assert!(kind("Service").count() >= 1);
    // The coordinator keeps its job store on a volume claim.
    let coordinator = kind("StatefulSet")
        .next()
        .expect("the coordinator is a StatefulSet");
    assert_eq!(
        coordinator["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].as_str(),
        Some("data")
    );
    let args = strings(&coordinator["spec"]["template"]["spec"]["containers"][0]["args"]);
    assert!(
        args.windows(2).any(|w| w == ["--data-dir", "/data"]),
        "{args:?}"
    );
    for deployment in kind("Deployment").chain(kind("StatefulSet")) {
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let args = strings(&container["args"]);
        if args[0] == "coordinator" {
            assert_eq!(
                container["livenessProbe"]["httpGet"]["path"].as_str(),
                Some("/healthz")
            );
            assert_eq!(
                container["readinessProbe"]["httpGet"]["path"].as_str(),
                Some("/readyz")
            );
            let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
            assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
        } else {
            assert!(!container["resources"]["requests"]["cpu"].is_badvalue());
            assert!(!container["resources"]["limits"]["cpu"].is_badvalue());
            // The pod must outlive the worker's drain.
            let drain: i64 = args
                .iter()
                .position(|a| a == "--drain-secs")
                .map(|i| args[i + 1].parse().unwrap())
                .unwrap();
            let grace = pod["terminationGracePeriodSeconds"].as_i64().unwrap();
            assert!(grace > drain, "grace {grace}s must exceed drain {drain}s");
        }
    }
}

/// The keys of a YAML mapping.
fn keys(map: &Yaml) -> Vec<String> {
    map.as_hash()
        .unwrap_or_else(|| panic!("not a mapping: {map:?}"))
        .keys()
        .map(|k| k.as_str().unwrap().to_string())
        .collect()
}

/// Fails naming every key of `map` (at `place`) that is not in `allowed`.
fn only(map: &Yaml, allowed: &[&str], place: &str) {
    let unknown: Vec<String> = keys(map)
        .into_iter()
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "{place}: {unknown:?} are not among KEDA's documented fields {allowed:?}"
    );
}

/// The KEDA ScaledObject uses only the fields KEDA documents (its
/// ScaledObject specification and its Prometheus scaler's parameters), has
/// the ones it requires, scales the workers' Deployment, and reads a
/// metric the coordinator exports. (kubernetes-validate has no schema for
/// it.)
#[test]
fn the_scaled_object_uses_keda_s_documented_fields() {
    let docs = load(&deploy_dir().join("k8s-scale-out/keda.yaml"));
    let so = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("ScaledObject"))
        .expect("a ScaledObject");
    only(
        so,
        &["apiVersion", "kind", "metadata", "spec"],
        "ScaledObject",
    );
    assert_eq!(so["apiVersion"].as_str(), Some("keda.sh/v1alpha1"));
    let spec = &so["spec"];
    only(
        spec,
        &[
            "scaleTargetRef",
            "pollingInterval",
            "cooldownPeriod",
            "initialCooldownPeriod",
            "idleReplicaCount",
            "minReplicaCount",
            "maxReplicaCount",
            "fallback",
            "advanced",
            "triggers",
        ],
        "spec",
    );
    only(
        &spec["scaleTargetRef"],
        &["apiVersion", "kind", "name", "envSourceContainerName"],
        "spec.scaleTargetRef",
    );
    // It scales the base's worker Deployment.
    let worker = load(&deploy_dir().join("k8s/worker.yaml"))
        .into_iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .unwrap();
    assert_eq!(
        spec["scaleTargetRef"]["name"].as_str(),
        worker["metadata"]["name"].as_str()
    );
    for field in [
        "pollingInterval",
        "cooldownPeriod",
        "minReplicaCount",
        "maxReplicaCount",
    ] {
        assert!(spec[field].as_i64().is_some(), "spec.{field} is a number");
    }
    assert!(spec["minReplicaCount"].as_i64() <= spec["maxReplicaCount"].as_i64());
    if !spec["fallback"].is_badvalue() {
        only(
            &spec["fallback"],
            &["failureThreshold", "replicas"],
            "spec.fallback",
        );
        assert!(spec["fallback"]["failureThreshold"].as_i64().is_some());
        assert!(spec["fallback"]["replicas"].as_i64().is_some());
    }
    if !spec["advanced"].is_badvalue() {
        only(
            &spec["advanced"],
            &[
                "restoreToOriginalReplicaCount",
                "horizontalPodAutoscalerConfig",
                "scalingModifiers",
            ],
            "spec.advanced",
        );
        let hpa = &spec["advanced"]["horizontalPodAutoscalerConfig"];
        if !hpa.is_badvalue() {
            only(
                hpa,
                &["name", "behavior"],
                "spec.advanced.horizontalPodAutoscalerConfig",
            );
        }
    }
    let triggers = spec["triggers"].as_vec().expect("spec.triggers is a list");
    assert!(!triggers.is_empty());
    for trigger in triggers {
        only(
            trigger,
            &[
                "type",
                "name",
                "metadata",
                "useCachedMetrics",
                "authenticationRef",
                "metricType",
            ],
            "a trigger",
        );
        assert_eq!(trigger["type"].as_str(), Some("prometheus"));
        if let Some(t) = trigger["metricType"].as_str() {
            assert!(["AverageValue", "Value", "Utilization"].contains(&t), "{t}");
        }
        let metadata = &trigger["metadata"];
        only(
            metadata,
            &[
                "serverAddress",
                "query",
                "queryParameters",
                "threshold",
                "activationThreshold",
                "namespace",
                "customHeaders",
                "ignoreNullValues",
                "unsafeSsl",
                "timeout",
                "authModes",
            ],
            "the prometheus trigger's metadata",
        );
        // KEDA's metadata is a map of strings.
        for key in keys(metadata) {
            assert!(
                metadata[key.as_str()].as_str().is_some(),
                "metadata.{key} is a string"
            );
        }
        for required in ["serverAddress", "query", "threshold"] {
            assert!(metadata[required].as_str().is_some(), "metadata.{required}");
        }
        let threshold = metadata["threshold"].as_str().unwrap();
        assert!(
            threshold.parse::<f64>().is_ok_and(|t| t > 0.0),
            "{threshold}"
        );
        // The query reads the coordinator's gauge of puzzles waiting for a
        // worker (colball_queued), as /metrics names it.
        let query = metadata["query"].as_str().unwrap();
        assert!(query.contains("colball_queued"), "{query}");
        let metrics = include_str!("../../src/http/metrics.rs");
        assert!(metrics.contains(r#"out.gauge("queued", "Puzzles waiting for a worker""#));
    }
}

/// The scale-out overlay runs the coordinator as a Deployment of 3
/// replicas with no volume, its store's URL and password from a Secret, a
/// PodDisruptionBudget that keeps 2 of them; the compose file runs two
/// coordinators on a postgres service, and workers that know both.
#[test]
fn the_scale_out_deployments_share_one_database() {
    let docs: Vec<Yaml> = scale_out_files().iter().flat_map(|p| load(p)).collect();
    let coordinator = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("Deployment"))
        .expect("the coordinators' Deployment");
    assert_eq!(coordinator["spec"]["replicas"].as_i64(), Some(3));
    let pod = &coordinator["spec"]["template"]["spec"];
    assert!(
        pod["volumes"].is_badvalue(),
        "no volume: the database keeps the jobs"
    );
    let container = &pod["containers"][0];
    let args = strings(&container["args"]);
    assert!(
        !args.iter().any(|a| a == "--data-dir" || a == "--store"),
        "{args:?}"
    );
    let env = container["env"].as_vec().unwrap();
    let store = env
        .iter()
        .find(|e| e["name"].as_str() == Some("COLBALL_STORE"))
        .expect("COLBALL_STORE");
    assert_eq!(
        store["valueFrom"]["secretKeyRef"]["name"].as_str(),
        Some("colball-store")
    );
    let pdb = docs
        .iter()
        .find(|d| d["kind"].as_str() == Some("PodDisruptionBudget"))
        .expect("a PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"].as_i64(), Some(2));
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        coordinator["spec"]["selector"]["matchLabels"]
    );

    let compose = &load(&deploy_dir().join("compose.scale-out.yaml"))[0];
    let services = &compose["services"];
    assert!(!services["postgres"]["healthcheck"].is_badvalue());
    let coordinators: Vec<String> = services
        .as_hash()
        .unwrap()
        .iter()
        .filter(|(_, s)| {
            !s["command"].is_badvalue()
                && strings(&s["command"]).first().map(String::as_str) == Some("coordinator")
        })
        .map(|(name, s)| {
            let command = strings(&s["command"]);
            assert!(
                command
                    .windows(2)
                    .any(|w| w[0] == "--store" && w[1].contains("@postgres:")),
                "{command:?}"
            );
            assert_eq!(
                s["depends_on"]["postgres"]["condition"].as_str(),
                Some("service_healthy")
            );
            name.as_str().unwrap().to_string()
        })
        .collect();
    assert!(coordinators.len() >= 2, "{coordinators:?}");
    let worker = strings(&services["worker"]["command"]);
    let dial = &worker[worker.iter().position(|a| a == "--coordinator").unwrap() + 1];
    for name in &coordinators {
        assert!(dial.contains(&format!("http://{name}:50051")), "{dial}");
    }
}
