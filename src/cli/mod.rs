//! Operator tools: `mirrorflow status` ([`status`]: a flow read through the Kubernetes API,
//! as a page), `mirrorflow translate` ([`translate`]: a group's checkpoints for failover) and
//! `mirrorflow audit` ([`audit`]: source records compared with their target copies) and
//! `mirrorflow failover` ([`failover`]: `spec.failover` patched, its report printed),
//! `mirrorflow failback` ([`failback`]: the reverse flow applied) and
//! `mirrorflow migrate-from-mm2` ([`migrate`]: `spec.source.startFrom.mirrorMaker2` patched).
//! The rendering is pure; the reads are thin edges beside it. They print the decisions of the
//! rooms below (`worker::checkpoint`, `worker::validation`), never make their own.

use kube::Api;

use crate::api::MirrorFlow;

pub mod audit;
pub mod failback;
pub mod failover;
pub mod flow_source;
pub mod migrate;
pub mod status;
pub mod translate;

/// `rows` (the first one the header) as left-aligned columns two spaces apart, each line
/// without trailing blanks. Pure.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// A client from the default kubeconfig (or in-cluster), with a message that says so.
pub async fn kube_client() -> anyhow::Result<kube::Client> {
    kube::Client::try_default().await.map_err(|e| {
        anyhow::anyhow!("cannot reach the Kubernetes API (KUBECONFIG or in-cluster): {e}")
    })
}

/// The MirrorFlow `ns/name`, or an error naming it.
pub async fn read_flow(client: &kube::Client, ns: &str, name: &str) -> anyhow::Result<MirrorFlow> {
    Api::<MirrorFlow>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| anyhow::anyhow!("reading MirrorFlow {ns}/{name}: {e}"))?
        .ok_or_else(|| anyhow::anyhow!("MirrorFlow {ns}/{name} not found"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let rows = vec![
            vec!["A".to_string(), "LONG HEADER".into(), "C".into()],
            vec!["wide cell".to_string(), "x".into(), "".into()],
        ];
        assert_eq!(table(&rows), "A          LONG HEADER  C\nwide cell  x\n");
        assert_eq!(table(&[]), "");
    }
}
