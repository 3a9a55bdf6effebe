//! Views the front ends share (the terminal and the HTML review): how a
//! record is laid out as rows, whoever draws them. The service layer
//! (`ops`) returns records; it lays nothing out.

use kidiom_catalog::record::SiteSummary;
use kidiom_validator::sitesearch::SiteSearch;

/// A site search's front as table rows (for `review`, its HTML page and
/// `apply`), the point `mark` flagged.
pub(crate) fn front_rows(s: &SiteSummary, mark: Option<usize>) -> Option<Vec<Vec<String>>> {
    let lengths: Vec<String> = s.lengths.iter().map(|t| format!("err T={t}")).collect();
    let mut head = vec!["".to_string(), "sites: values".to_string()];
    head.extend(lengths);
    head.extend(["instr".into(), "spill B".into(), "local".into(), "tensor".into(), "roles".into()]);
    let mut rows = vec![head];
    let base = s.points.iter().find(|p| p.is("baseline"))?;
    let base_ins = base.figures.as_ref().map(|f| f.instructions).unwrap_or(0).max(1);
    let mut shown: Vec<usize> = (0..s.points.len())
        .filter(|&i| ["front", "chosen", "baseline", "all-sites"].iter().any(|r| s.points[i].is(r)))
        .collect();
    shown.sort_by(|&a, &b| s.points[a].last_error().total_cmp(&s.points[b].last_error()));
    for i in shown {
        let p = &s.points[i];
        let mut row = vec![
            if Some(i) == mark { "->".into() } else { String::new() },
            SiteSearch::describe_with(&s.values, &p.assignment),
        ];
        row.extend(p.error.iter().map(|e| e.map(|e| format!("{e:.2e}")).unwrap_or_else(|| "-".into())));
        match &p.figures {
            Some(f) => row.extend([
                format!("{} ({:.2}x)", f.instructions, f.instructions as f64 / base_ins as f64),
                f.spill_store_bytes.to_string(),
                f.local.to_string(),
                f.tensor.to_string(),
            ]),
            None => row.extend(["-".into(), "-".into(), "-".into(), "-".into()]),
        }
        let mut roles = p.roles.join(",");
        if !p.predicted_slower.is_empty() {
            roles.push_str(" (predicted slower)");
        }
        row.push(roles);
        rows.push(row);
    }
    Some(rows)
}
