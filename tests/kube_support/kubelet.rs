//! A "process kubelet": no kubelet, scheduler or StatefulSet controller runs beside our API
//! server, so this stands in for all three, for the StatefulSets mirrorflow's controller
//! creates (label `app.kubernetes.io/managed-by=mirrorflow-controller`).
//!
//! For each such StatefulSet it runs `spec.replicas` pods as local `mirrorflow` processes
//! built from the pod template: the command and args (mount paths and the container port
//! mapped to a pod directory and a free loopback port), env (`POD_NAME`, `POD_NAMESPACE` from
//! field refs), the ConfigMap and Secret volumes written under the pod directory at the mount
//! paths (ConfigMaps kept up to date, as a kubelet does), and the pod's ServiceAccount as a
//! token from the TokenRequest API in `KUBECONFIG`. It creates the Pod objects, sets their
//! status from the readiness probe, restarts a process that exits or fails its liveness
//! probe, sets the StatefulSet's status the way its controller would (replicas, ready,
//! current/updated revisions), rolls pods one at a time to a changed template, stops pods
//! (SIGTERM, then SIGKILL after the grace period) when scaled down or when the StatefulSet is
//! gone, and deletes their Pod objects once the process has exited.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use super::cluster::Cluster;
use super::process::{binary, free_port, http_get, Proc};

const MANAGED: &str = "app.kubernetes.io/managed-by=mirrorflow-controller";
const TICK: Duration = Duration::from_millis(500);

/// What a test can see of one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub statefulset: String,
    pub ordinal: i32,
    pub revision: String,
    pub addr: SocketAddr,
    pub running: bool,
    pub ready: bool,
    pub terminating: bool,
    pub restarts: i32,
    pub log: PathBuf,
    /// The process's pid while it runs.
    pub pid: Option<i32>,
}

struct PodRun {
    info: PodInfo,
    proc: Option<Proc>,
    dir: PathBuf,
    grace: Duration,
    config_maps: Vec<ConfigVolume>,
    readiness: Option<(String, u16)>,
    liveness: Option<(String, u16, Duration, i32)>,
    liveness_failures: i32,
    next_liveness: Instant,
    restart_at: Option<Instant>,
    /// What the Pod object's status says.
    reported: Option<(bool, i32)>,
    started_at: jiff::Timestamp,
    launch: Launch,
}

/// A ConfigMap volume: (ConfigMap name, directory, keys → paths when `items` are given).
type ConfigVolume = (String, PathBuf, Option<BTreeMap<String, String>>);

/// Everything needed to start the process again.
#[derive(Clone)]
struct Launch {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// The running kubelet; dropping it stops every pod.
pub struct Kubelet {
    pods: Arc<Mutex<Vec<PodInfo>>>,
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
    pub root: PathBuf,
}

impl Kubelet {
    /// Starts the loop for the StatefulSets in `namespaces`.
    pub fn start(cluster: Arc<Cluster>, namespaces: Vec<String>, root: PathBuf) -> Kubelet {
        let pods = Arc::new(Mutex::new(Vec::new()));
        let (stop, stop_rx) = watch::channel(false);
        let mut state = State {
            cluster,
            namespaces,
            root: root.clone(),
            runs: BTreeMap::new(),
            sts_reported: BTreeMap::new(),
            current_revision: BTreeMap::new(),
            incarnation: 0,
            shared: pods.clone(),
        };
        let task = tokio::spawn(async move { state.run(stop_rx).await });
        Kubelet {
            pods,
            stop,
            task: Some(task),
            root,
        }
    }

    /// The pods now (terminating ones included).
    pub fn pods(&self) -> Vec<PodInfo> {
        self.pods.lock().unwrap().clone()
    }

    /// The pods of one StatefulSet.
    pub fn pods_of(&self, namespace: &str, sts: &str) -> Vec<PodInfo> {
        self.pods()
            .into_iter()
            .filter(|p| p.namespace == namespace && p.statefulset == sts)
            .collect()
    }

    /// Stops every pod and the loop.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(60), t).await;
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            t.abort(); // processes are killed when their handles drop
        }
    }
}

type Key = (String, String); // (namespace, pod name)

struct State {
    cluster: Arc<Cluster>,
    namespaces: Vec<String>,
    root: PathBuf,
    runs: BTreeMap<Key, PodRun>,
    sts_reported: BTreeMap<Key, serde_json::Value>,
    current_revision: BTreeMap<Key, String>,
    incarnation: u64,
    shared: Arc<Mutex<Vec<PodInfo>>>,
}

fn client(s: &State) -> Client {
    s.cluster.client.clone()
}

/// `controller-revision-hash` of a template: FNV-1a of its JSON, 10 hex digits.
fn revision(sts: &StatefulSet) -> String {
    let t = serde_json::to_vec(&sts.spec.as_ref().map(|s| &s.template)).unwrap();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in t {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{}-{:010x}", sts.name_any(), h & 0xff_ffff_ffff)
}

impl State {
    async fn run(&mut self, mut stop: watch::Receiver<bool>) {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Key>();
        loop {
            if *stop.borrow() {
                break;
            }
            while let Ok(k) = done_rx.try_recv() {
                self.runs.remove(&k);
            }
            if let Err(e) = self.tick(&done_tx).await {
                eprintln!("kubelet: {e}");
            }
            self.publish();
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = stop.changed() => {}
            }
        }
        // Stop everything still running, in parallel.
        let keys: Vec<Key> = self.runs.keys().cloned().collect();
        for k in &keys {
            self.terminate(k, &done_tx);
        }
        let deadline = Instant::now() + Duration::from_secs(45);
        while !self.runs.is_empty() && Instant::now() < deadline {
            if let Ok(Some(k)) = tokio::time::timeout(Duration::from_secs(1), done_rx.recv()).await
            {
                self.runs.remove(&k);
            }
        }
        self.publish();
    }

    fn publish(&self) {
        *self.shared.lock().unwrap() = self.runs.values().map(|r| r.info.clone()).collect();
    }

    async fn tick(&mut self, done: &mpsc::UnboundedSender<Key>) -> Result<(), kube::Error> {
        let mut seen: BTreeSet<Key> = BTreeSet::new();
        let mut sets = Vec::new();
        for ns in self.namespaces.clone() {
            let api: Api<StatefulSet> = Api::namespaced(client(self), &ns);
            sets.extend(
                api.list(&ListParams::default().labels(MANAGED))
                    .await?
                    .items,
            );
        }
        // ConfigMap contents, for the volumes of running pods.
        let mut config_maps: BTreeMap<Key, ConfigMap> = BTreeMap::new();
        for ns in self.namespaces.clone() {
            let api: Api<ConfigMap> = Api::namespaced(client(self), &ns);
            for cm in api.list(&ListParams::default()).await?.items {
                config_maps.insert((ns.clone(), cm.name_any()), cm);
            }
        }
        for sts in &sets {
            let ns = sts.namespace().unwrap_or_default();
            let name = sts.name_any();
            seen.insert((ns.clone(), name.clone()));
            self.sync_statefulset(sts, done).await;
        }
        // StatefulSets that are gone: their pods go too.
        let orphans: Vec<Key> = self
            .runs
            .iter()
            .filter(|(_, r)| {
                !r.info.terminating
                    && !seen.contains(&(r.info.namespace.clone(), r.info.statefulset.clone()))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in orphans {
            self.terminate(&k, done);
        }
        self.refresh_config_maps(&config_maps);
        self.probe_and_restart().await;
        self.report_pods().await;
        for sts in &sets {
            self.report_statefulset(sts).await;
        }
        Ok(())
    }

    async fn sync_statefulset(&mut self, sts: &StatefulSet, done: &mpsc::UnboundedSender<Key>) {
        let ns = sts.namespace().unwrap_or_default();
        let name = sts.name_any();
        let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let rev = revision(sts);
        let mine: Vec<Key> = self
            .runs
            .iter()
            .filter(|(_, r)| r.info.namespace == ns && r.info.statefulset == name)
            .map(|(k, _)| k.clone())
            .collect();
        // Scale down.
        for k in &mine {
            let r = &self.runs[k];
            if r.info.ordinal >= replicas && !r.info.terminating {
                self.terminate(k, done);
            }
        }
        // Scale up (an ordinal whose old pod still terminates waits for it).
        for i in 0..replicas {
            let key = (ns.clone(), format!("{name}-{i}"));
            if !self.runs.contains_key(&key) {
                match self.start_pod(sts, i, &rev).await {
                    Ok(run) => {
                        self.runs.insert(key, run);
                    }
                    Err(e) => eprintln!("kubelet: cannot start {}/{name}-{i}: {e}", ns),
                }
            }
        }
        // Rolling update, one pod at a time from the highest ordinal, while the others are ready.
        let live: Vec<&PodRun> = self
            .runs
            .values()
            .filter(|r| r.info.namespace == ns && r.info.statefulset == name)
            .collect();
        let all_ready = live.iter().all(|r| r.info.ready && !r.info.terminating);
        if all_ready {
            if let Some(k) = live
                .iter()
                .filter(|r| r.info.revision != rev)
                .max_by_key(|r| r.info.ordinal)
                .map(|r| (r.info.namespace.clone(), r.info.name.clone()))
            {
                self.terminate(&k, done);
            }
        }
    }

    /// Stops a pod in the background: SIGTERM, grace, SIGKILL, then deletes its Pod object.
    fn terminate(&mut self, key: &Key, done: &mpsc::UnboundedSender<Key>) {
        let Some(r) = self.runs.get_mut(key) else {
            return;
        };
        if r.info.terminating {
            return;
        }
        r.info.terminating = true;
        r.info.ready = false;
        let proc = r.proc.take();
        let grace = r.grace;
        let api: Api<Pod> = Api::namespaced(self.cluster.client.clone(), &key.0);
        let (key, done) = (key.clone(), done.clone());
        tokio::spawn(async move {
            if let Some(mut p) = proc {
                p.stop(grace).await;
            }
            let _ = api
                .delete(&key.1, &DeleteParams::default().grace_period(0))
                .await;
            let _ = done.send(key);
        });
    }

    async fn start_pod(
        &mut self,
        sts: &StatefulSet,
        ordinal: i32,
        rev: &str,
    ) -> anyhow::Result<PodRun> {
        let ns = sts.namespace().unwrap_or_default();
        let sts_name = sts.name_any();
        let name = format!("{sts_name}-{ordinal}");
        let spec = sts.spec.as_ref().expect("spec");
        let tmeta = spec.template.metadata.clone().unwrap_or_default();
        let pspec: PodSpec = spec.template.spec.clone().expect("pod template spec");
        self.incarnation += 1;
        let dir = self
            .root
            .join(&ns)
            .join(format!("{name}.{}", self.incarnation));
        std::fs::create_dir_all(&dir)?;

        // The Pod object, as the StatefulSet controller would create it.
        let mut labels = tmeta.labels.clone().unwrap_or_default();
        labels.insert("statefulset.kubernetes.io/pod-name".into(), name.clone());
        labels.insert("controller-revision-hash".into(), rev.into());
        labels.insert("apps.kubernetes.io/pod-index".into(), ordinal.to_string());
        let mut pod_spec = pspec.clone();
        pod_spec.hostname = Some(name.clone());
        pod_spec.subdomain = spec.service_name.clone();
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": ns, "labels": labels,
                "annotations": tmeta.annotations.clone().unwrap_or_default(),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts_name,
                                     "uid": sts.uid().unwrap_or_default(), "controller": true,
                                     "blockOwnerDeletion": true}],
            },
            "spec": pod_spec,
        }))?;
        let pods: Api<Pod> = Api::namespaced(client(self), &ns);
        let _ = pods
            .delete(&name, &DeleteParams::default().grace_period(0))
            .await;
        pods.create(&PostParams::default(), &pod).await?;

        let c: &Container = pspec.containers.first().expect("a container");
        let container_port = c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some("http"))
            .map(|p| p.container_port as u16)
            .unwrap_or(8080);
        let port = free_port();
        // Volumes at their mount paths under the pod directory.
        let mut mounts: Vec<(String, PathBuf)> = Vec::new();
        let mut config_maps = Vec::new();
        for m in c.volume_mounts.iter().flatten() {
            let host = dir.join(m.mount_path.trim_start_matches('/'));
            std::fs::create_dir_all(&host)?;
            let vol = pspec
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == m.name)
                .ok_or_else(|| anyhow::anyhow!("no volume {}", m.name))?;
            if let Some(cm) = &vol.config_map {
                let items = cm
                    .items
                    .as_ref()
                    .map(|i| i.iter().map(|k| (k.key.clone(), k.path.clone())).collect());
                config_maps.push((cm.name.clone(), host.clone(), items));
            } else if let Some(sv) = &vol.secret {
                let secret_name = sv.secret_name.clone().unwrap_or_default();
                let secrets: Api<Secret> = Api::namespaced(client(self), &ns);
                let secret = secrets.get(&secret_name).await?;
                let data = secret.data.unwrap_or_default();
                let items: Vec<(String, String)> = match &sv.items {
                    Some(items) => items
                        .iter()
                        .map(|k| (k.key.clone(), k.path.clone()))
                        .collect(),
                    None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
                };
                for (key, path) in items {
                    let bytes = data
                        .get(&key)
                        .ok_or_else(|| anyhow::anyhow!("Secret {secret_name} has no key {key}"))?;
                    std::fs::write(host.join(path), &bytes.0)?;
                }
            } else if vol.empty_dir.is_none() {
                anyhow::bail!(
                    "volume {}: only configMap, secret and emptyDir are supported",
                    m.name
                );
            }
            mounts.push((m.mount_path.clone(), host));
        }
        // Longest mount path first, so /a/b wins over /a.
        mounts.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
        let map_arg = |a: &str| -> String {
            let a = a.replace(
                &format!("0.0.0.0:{container_port}"),
                &format!("127.0.0.1:{port}"),
            );
            for (mount, host) in &mounts {
                if let Some(rest) = a.strip_prefix(mount.as_str()) {
                    return format!("{}{rest}", host.display());
                }
            }
            a
        };
        let command = c.command.clone().unwrap_or_default();
        anyhow::ensure!(
            command.first().map(String::as_str) == Some("mirrorflow"),
            "only the mirrorflow command runs here, not {command:?}"
        );
        let mut args: Vec<String> = command[1..].iter().map(|a| map_arg(a)).collect();
        args.extend(c.args.iter().flatten().map(|a| map_arg(a)));
        let mut env: Vec<(String, String)> = Vec::new();
        for e in c.env.iter().flatten() {
            let v = match (&e.value, &e.value_from) {
                (Some(v), _) => v.clone(),
                (None, Some(from)) => {
                    match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                        Some("metadata.name") => name.clone(),
                        Some("metadata.namespace") => ns.clone(),
                        Some("status.podIP") => "127.0.0.1".into(),
                        other => anyhow::bail!("env {}: unsupported source {other:?}", e.name),
                    }
                }
                (None, None) => String::new(),
            };
            env.push((e.name.clone(), v));
        }
        if pspec.automount_service_account_token != Some(false) {
            let sa = pspec
                .service_account_name
                .clone()
                .unwrap_or_else(|| "default".into());
            let token = self.cluster.sa_token(&ns, &sa).await?;
            let kc = self.cluster.kubeconfig_for(
                &format!("{ns}.{name}.{}", self.incarnation),
                &token,
                &ns,
            );
            env.push(("KUBECONFIG".into(), kc.to_string_lossy().into_owned()));
        }
        fn probe(
            p: &Option<k8s_openapi::api::core::v1::Probe>,
        ) -> Option<(String, &k8s_openapi::api::core::v1::Probe)> {
            p.as_ref().and_then(|p| {
                p.http_get
                    .as_ref()
                    .map(|h| (h.path.clone().unwrap_or_else(|| "/".into()), p))
            })
        }
        let readiness = probe(&c.readiness_probe).map(|(path, _)| (path, port));
        let liveness = probe(&c.liveness_probe).map(|(path, p)| {
            (
                path,
                port,
                Duration::from_secs(p.period_seconds.unwrap_or(10) as u64),
                p.failure_threshold.unwrap_or(3),
            )
        });
        let launch = Launch {
            program: binary(),
            args,
            env,
        };
        let log = dir.join("worker.log");
        let mut run = PodRun {
            info: PodInfo {
                namespace: ns.clone(),
                name: name.clone(),
                statefulset: sts_name,
                ordinal,
                revision: rev.to_string(),
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                running: false,
                ready: false,
                terminating: false,
                restarts: 0,
                log: log.clone(),
                pid: None,
            },
            proc: None,
            dir,
            grace: Duration::from_secs(pspec.termination_grace_period_seconds.unwrap_or(30) as u64),
            config_maps,
            readiness,
            liveness,
            liveness_failures: 0,
            next_liveness: Instant::now() + Duration::from_secs(10),
            restart_at: None,
            reported: None,
            started_at: jiff::Timestamp::now(),
            launch,
        };
        // The config files must be there before the process starts.
        let mut cms = BTreeMap::new();
        for (cm, _, _) in &run.config_maps {
            let api: Api<ConfigMap> = Api::namespaced(client(self), &ns);
            cms.insert((ns.clone(), cm.clone()), api.get(cm).await?);
        }
        write_config_maps(&mut run, &cms);
        spawn(&mut run)?;
        Ok(run)
    }

    fn refresh_config_maps(&mut self, cms: &BTreeMap<Key, ConfigMap>) {
        for r in self.runs.values_mut().filter(|r| !r.info.terminating) {
            write_config_maps(r, cms);
        }
    }

    async fn probe_and_restart(&mut self) {
        for r in self.runs.values_mut().filter(|r| !r.info.terminating) {
            let exited = r.proc.as_mut().is_some_and(|p| !p.running());
            if exited {
                eprintln!(
                    "kubelet: {}/{} exited; restarting. Last output:\n{}",
                    r.info.namespace,
                    r.info.name,
                    r.proc.as_ref().map(|p| p.tail(10)).unwrap_or_default()
                );
                r.proc = None;
                r.info.pid = None;
                r.info.running = false;
                r.info.ready = false;
                r.restart_at = Some(Instant::now() + Duration::from_secs(1));
            }
            if r.proc.is_none() {
                if r.restart_at.is_some_and(|t| Instant::now() >= t) {
                    r.info.restarts += 1;
                    r.restart_at = None;
                    if let Err(e) = spawn(r) {
                        eprintln!("kubelet: restart {}: {e}", r.info.name);
                    }
                }
                continue;
            }
            if let Some((path, port)) = &r.readiness {
                let addr = SocketAddr::from(([127, 0, 0, 1], *port));
                r.info.ready = matches!(http_get(addr, path).await, Some((200, _)));
            }
            if let Some((path, port, period, threshold)) = &r.liveness {
                if Instant::now() >= r.next_liveness {
                    r.next_liveness = Instant::now() + *period;
                    let addr = SocketAddr::from(([127, 0, 0, 1], *port));
                    if matches!(http_get(addr, path).await, Some((200, _))) {
                        r.liveness_failures = 0;
                    } else {
                        r.liveness_failures += 1;
                        if r.liveness_failures >= *threshold {
                            eprintln!(
                                "kubelet: {} failed its liveness probe; restarting",
                                r.info.name
                            );
                            if let Some(mut p) = r.proc.take() {
                                p.stop(r.grace).await;
                            }
                            r.liveness_failures = 0;
                            r.info.running = false;
                            r.info.ready = false;
                            r.restart_at = Some(Instant::now());
                        }
                    }
                }
            }
        }
    }

    async fn report_pods(&mut self) {
        let client = client(self);
        for r in self.runs.values_mut().filter(|r| !r.info.terminating) {
            let now = (r.info.ready, r.info.restarts);
            if r.reported == Some(now) {
                continue;
            }
            let ready = if r.info.ready { "True" } else { "False" };
            let t = jiff::Timestamp::now().to_string();
            let status = json!({"status": {
                "phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
                "startTime": r.started_at.to_string(),
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": t},
                    {"type": "Ready", "status": ready, "lastTransitionTime": t},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": t},
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
                ],
                "containerStatuses": [{"name": "worker", "ready": r.info.ready, "restartCount": r.info.restarts,
                                       "image": "mirrorflow (local process)", "imageID": "", "started": r.info.running,
                                       "state": {"running": {"startedAt": r.started_at.to_string()}}}],
            }});
            let api: Api<Pod> = Api::namespaced(client.clone(), &r.info.namespace);
            match api
                .patch_status(
                    &r.info.name,
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await
            {
                Ok(_) => r.reported = Some(now),
                Err(e) => eprintln!("kubelet: status of pod {}: {e}", r.info.name),
            }
        }
    }

    async fn report_statefulset(&mut self, sts: &StatefulSet) {
        let ns = sts.namespace().unwrap_or_default();
        let name = sts.name_any();
        let key = (ns.clone(), name.clone());
        let replicas = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let update = revision(sts);
        let pods: Vec<&PodInfo> = self
            .runs
            .values()
            .map(|r| &r.info)
            .filter(|p| p.namespace == ns && p.statefulset == name)
            .collect();
        let all_updated = pods.iter().filter(|p| !p.terminating).count() as i32 == replicas
            && pods.iter().all(|p| p.revision == update && !p.terminating);
        let current = if all_updated || pods.is_empty() {
            update.clone()
        } else {
            self.current_revision
                .get(&key)
                .cloned()
                .unwrap_or_else(|| update.clone())
        };
        self.current_revision.insert(key.clone(), current.clone());
        let ready = pods.iter().filter(|p| p.ready).count() as i32;
        let status = json!({"status": {
            "observedGeneration": sts.metadata.generation,
            "replicas": pods.len() as i32,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "currentReplicas": pods.iter().filter(|p| p.revision == current).count() as i32,
            "updatedReplicas": pods.iter().filter(|p| p.revision == update).count() as i32,
            "currentRevision": current,
            "updateRevision": update,
        }});
        let live = sts
            .status
            .as_ref()
            .map(|s| json!({"status": serde_json::to_value(s).unwrap()}));
        if self.sts_reported.get(&key) == Some(&status)
            && live.as_ref().is_some_and(|l| same_status(l, &status))
        {
            return;
        }
        let api: Api<StatefulSet> = Api::namespaced(client(self), &ns);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            Ok(_) => {
                self.sts_reported.insert(key, status);
            }
            Err(e) => eprintln!("kubelet: status of StatefulSet {name}: {e}"),
        }
    }
}

/// Whether the live status already holds every field we would write.
fn same_status(live: &serde_json::Value, want: &serde_json::Value) -> bool {
    want["status"].as_object().unwrap().iter().all(|(k, v)| {
        let l = &live["status"][k];
        l == v || (v == &json!(0) && l.is_null())
    })
}

fn write_config_maps(r: &mut PodRun, cms: &BTreeMap<Key, ConfigMap>) {
    for (name, dir, items) in &r.config_maps {
        let Some(cm) = cms.get(&(r.info.namespace.clone(), name.clone())) else {
            continue;
        };
        let data = cm.data.clone().unwrap_or_default();
        let files: Vec<(String, String)> = match items {
            Some(items) => items.iter().map(|(k, p)| (k.clone(), p.clone())).collect(),
            None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
        };
        for (key, path) in files {
            let Some(text) = data.get(&key) else { continue };
            let file = dir.join(&path);
            if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
                // Atomic, like the kubelet's symlink swap: a reader never sees half a file.
                let tmp = dir.join(format!(".{path}.tmp"));
                std::fs::write(&tmp, text).unwrap();
                std::fs::rename(&tmp, &file).unwrap();
            }
        }
    }
}

fn spawn(r: &mut PodRun) -> std::io::Result<()> {
    let p = Proc::spawn(
        &r.info.name,
        &r.launch.program,
        &r.launch.args,
        &r.launch.env,
        r.info.log.clone(),
    )?;
    r.info.pid = p.pid();
    r.proc = Some(p);
    r.info.running = true;
    r.started_at = jiff::Timestamp::now();
    let _ = Path::new(&r.dir);
    Ok(())
}
