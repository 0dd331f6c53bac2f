//! Operator tools that read a flow through the Kubernetes API and print it: `mirrorflow
//! status` ([`status`]). The rendering is pure; the API read is a thin edge beside it.
//! (`mirrorflow translate` lives with the checkpoints it reads: `worker::checkpoint::cli`.)

pub mod status;

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
