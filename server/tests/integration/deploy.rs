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
    let mut files = vec![deploy_dir().join("compose.yaml")];
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

/// Every command line in the compose file and the manifests.
fn command_lines() -> Vec<(String, Vec<String>)> {
    let mut lines = Vec::new();
    let compose = &load(&deploy_dir().join("compose.yaml"))[0];
    for (name, service) in compose["services"].as_hash().unwrap() {
        if !service["command"].is_badvalue() {
            lines.push((
                format!("compose {}", name.as_str().unwrap()),
                strings(&service["command"]),
            ));
        }
    }
    for path in yaml_files()
        .iter()
        .filter(|p| p.starts_with(deploy_dir().join("k8s")))
    {
        for doc in load(path) {
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
    // compose: coordinator and worker; k8s: coordinator and worker; CMD.
    assert!(lines.len() >= 5, "{lines:?}");
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
