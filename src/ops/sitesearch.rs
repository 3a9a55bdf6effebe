//! The per-site search as `apply` and `run` use it: which (pattern, file)
//! pairs are searched instead of rewritten everywhere, the values tried,
//! and the candidates a search yields (its chosen variant, the rest of its
//! Pareto front, and the all-sites variant of each value that fixes), each
//! carrying the whole search in its provenance so `review` can show the
//! front beside it. The search itself is `kidiom_validator::sitesearch`.

use anyhow::Result;
use kidiom_patterns::record::{Provenance, RoleSite, RolesOrigin, SearchOrigin, SiteOrigin, SiteSummary};
use kidiom_patterns::{Candidate, Category, Pattern};
use kidiom_rewriter::{Rewrite, RewriteSpec, writable_value};
use kidiom_syntax::{Lang, blob_id};
use kidiom_validator::sitesearch::{Assignment, Request, Role, Rule, Site, SiteSearch};
use kidiom_validator::{KernelLanguage, StaticLimits, Validator};

/// How `apply` searches.
pub(crate) struct Options<'a> {
    /// The kernels' validator (`None`: the project has no kernels/ directory, so no manifest
    /// and no precision search; memory hints need none).
    pub(crate) validator: Option<&'a Validator>,
    /// Variants measured at a time.
    pub(crate) jobs: usize,
    pub(crate) rule: Rule,
    pub(crate) limits: StaticLimits,
    /// Hears what is being searched, before each search starts.
    pub(crate) progress: &'a (dyn Fn(String) + Sync),
    /// Hears of each batch of a search: variants measured, planned.
    pub(crate) measured: Option<kidiom_validator::sitesearch::Progress<'a>>,
}

/// Whether `p` on the file `rel` is searched: a precision pattern with a
/// value to choose, on a Triton kernel whose manifest has an error curve;
/// or a memory hint on loads or stores (chosen per access by role).
pub(crate) fn searchable(v: Option<&Validator>, p: &Pattern, rw: &Rewrite, rel: &str, lang: Lang) -> bool {
    if lang != Lang::Python || rw.value().is_none() {
        return false;
    }
    hint_op(p).is_some() || (p.category == Category::Precision && not_searched(v, p, rw, rel, lang).is_none())
}

/// Why a precision pattern with a value is not searched on the Python file
/// `rel` (`None`: it is, or it is no such pattern): the search measures the
/// error curve a Triton kernel's manifest defines and compiles the kernel
/// it names, so a file no manifest names (upstream code, a helper, a
/// symlink to a kernel) has neither.
pub(crate) fn not_searched(v: Option<&Validator>, p: &Pattern, rw: &Rewrite, rel: &str, lang: Lang) -> Option<String> {
    if lang != Lang::Python || rw.value().is_none() || p.category != Category::Precision || hint_op(p).is_some() {
        return None;
    }
    let Some(v) = v else {
        return Some(
            "the project has no kernels/ directory, so no manifest defines an error curve to search on".into(),
        );
    };
    match v.kernels().for_source(rel) {
        None => Some(format!(
            "no kernel manifest names {rel} as its source, so there is no error curve to measure and no kernel to compile"
        )),
        Some(m) if m.language != KernelLanguage::Triton => {
            Some(format!("{} is a {:?} kernel; the search measures Triton kernels", m.name, m.language))
        }
        Some(m) if m.curve.is_none() => {
            Some(format!("{}'s manifest has no [curve], so there is no error to search on", m.name))
        }
        Some(_) => None,
    }
}

/// `load` or `store` when `p` adds a hint to `tl.load`/`tl.store`.
pub(crate) fn hint_op(p: &Pattern) -> Option<&'static str> {
    if p.category != Category::Memory {
        return None;
    }
    let b = p.before.trim();
    if b.starts_with("tl.load(") {
        Some("load")
    } else if b.starts_with("tl.store(") {
        Some("store")
    } else {
        None
    }
}

/// The Python tree of `text` and the pattern compiled once per value.
fn parsed_with_rewrites(
    p: &Pattern,
    values: &[String],
    rel: &str,
    text: &str,
) -> Result<(tree_sitter::Tree, Vec<Rewrite>)> {
    let tree = kidiom_syntax::parse_tree(Lang::Python, text)
        .map_err(|s| anyhow::anyhow!("{rel}: {s}"))?
        .ok_or_else(|| anyhow::anyhow!("{rel}: no grammar"))?;
    let spec = RewriteSpec::from(p);
    let rws = values.iter().map(|v| Rewrite::new(&spec, Some(v))).collect::<Result<_, _>>()?;
    Ok((tree, rws))
}

/// A memory hint per access by the role of its tensor
/// (`kidiom_rewriter::roles`): the value that suits each role,
/// the first in histogram order; accesses without a role or a suitable
/// value are left alone. Candidates: every access by its role (the
/// choice), and each role alone.
pub(crate) fn role_candidates(p: &Pattern, values: &[String], rel: &str, text: &str) -> Result<Vec<Candidate>> {
    use kidiom_rewriter::roles::{hint_suits, memory_accesses};
    let Some(op) = hint_op(p) else { return Ok(Vec::new()) };
    let (tree, rws) = parsed_with_rewrites(p, values, rel, text)?;
    let Some(first) = rws.first() else { return Ok(Vec::new()) };
    let ranges = kidiom_rewriter::sites(first, text, &tree);
    let accesses = memory_accesses(text, &tree);
    // per site: (range, access, value index)
    let mut plan = Vec::new();
    for r in &ranges {
        let Some(a) = accesses.iter().find(|a| a.op == op && a.site.start == r.start) else { continue };
        let Some(v) = values.iter().position(|v| hint_suits(v, op, a.role)) else { continue };
        plan.push((r.clone(), a, v));
    }
    let role_sites: Vec<RoleSite> = plan
        .iter()
        .map(|(r, a, v)| RoleSite {
            line: text[..r.start].matches('\n').count() as u64 + 1,
            base: a.base.clone(),
            role: a.role.name().into(),
            value: values[*v].clone(),
            why: a.why.clone(),
        })
        .collect();
    let mut groups: Vec<(String, Vec<usize>)> = vec![("by role".into(), (0..plan.len()).collect())];
    let mut roles: Vec<_> = plan.iter().map(|(_, a, _)| a.role).collect();
    roles.sort();
    roles.dedup();
    if roles.len() > 1 {
        for role in roles {
            groups
                .push((format!("{} only", role.name()), (0..plan.len()).filter(|&i| plan[i].1.role == role).collect()));
        }
    }
    let mut out: Vec<Candidate> = Vec::new();
    for (gi, (label, members)) in groups.iter().enumerate() {
        let choices: Vec<_> = members.iter().map(|&i| (plan[i].0.clone(), &rws[plan[i].2])).collect();
        let Some(o) = kidiom_rewriter::rewrite_sites(&choices, Lang::Python, text, &tree, rel)? else { continue };
        if out.iter().any(|c| c.result_blob == blob_id(o.text.as_bytes())) {
            continue;
        }
        let mut used: Vec<&str> = members.iter().map(|&i| values[plan[i].2].as_str()).collect();
        used.dedup();
        let value = format!("{label}: {}", used.join(", "));
        let provenance = Provenance::of_pattern(p, Some(&value)).with_search(SearchOrigin::MemoryRoles(RolesOrigin {
            roles: vec![if gi == 0 { "chosen" } else { "alternative" }.into()],
            assignment: label.clone(),
            sites: members.iter().map(|&i| role_sites[i].clone()).collect(),
            all_sites: ranges.len() as u64,
        }));
        out.push(proposed(p, rel, text, &o.text, value, o.sites as u64, provenance));
    }
    Ok(out)
}

/// The values a search tries: `pinned` alone, else every literal the
/// histogram supports (named constants through what they resolve to),
/// normalized and deduplicated, most frequent first.
pub(crate) fn values(p: &Pattern, pinned: Option<&str>, default: Option<&str>) -> Vec<String> {
    if let Some(v) = pinned {
        return vec![v.to_string()];
    }
    let mut out: Vec<String> = Vec::new();
    for vc in &p.values {
        // a name that resolves: its literals; a writable name of Triton's (`tl.float32`): itself
        let lits = vc.literal_values();
        let own = [vc.value.as_str()];
        for lit in if lits.is_empty() { &own[..] } else { &lits[..] } {
            // one spelling per string literal, as the miner writes them (`'ieee'` is `"ieee"`)
            let lit = kidiom_miner::canonical_literals(lit.trim());
            if writable_value(p.language, &lit) && !out.contains(&lit) {
                out.push(lit);
            }
        }
    }
    if out.is_empty()
        && let Some(d) = default
    {
        out.push(d.to_string());
    }
    out
}

/// The file with every site of `p` given each value in turn (one text per
/// value; none when the file has no site).
pub(crate) fn all_sites_texts(p: &Pattern, values: &[String], rel: &str, text: &str) -> Result<Vec<String>> {
    let (tree, rws) = parsed_with_rewrites(p, values, rel, text)?;
    let Some(first) = rws.first() else { return Ok(Vec::new()) };
    let ranges = kidiom_rewriter::sites(first, text, &tree);
    if ranges.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for rw in &rws {
        let choices: Vec<_> = ranges.iter().map(|r| (r.clone(), rw)).collect();
        if let Some(o) = kidiom_rewriter::rewrite_sites(&choices, Lang::Python, text, &tree, rel)? {
            out.push(o.text);
        }
    }
    Ok(out)
}

/// The search of `p` on one file, and the candidates it yields (`None`:
/// the file has no site of `p`, as plain `apply` would find none).
pub(crate) fn search_file(
    o: &Options,
    p: &Pattern,
    values: &[String],
    rel: &str,
    text: &str,
) -> Result<Option<(SiteSearch, Vec<Candidate>)>> {
    let Some(validator) = o.validator else { anyhow::bail!("no kernels/ directory: no manifest names {rel}") };
    let (tree, rws) = parsed_with_rewrites(p, values, rel, text)?;
    let Some(first) = rws.first() else { anyhow::bail!("{} has no value to write at {rel}", p.id) };
    let ranges = kidiom_rewriter::sites(first, text, &tree);
    if ranges.is_empty() {
        return Ok(None);
    }
    let sites: Vec<Site> = ranges
        .iter()
        .map(|r| Site {
            line: text[..r.start].matches('\n').count() + 1,
            range: r.clone(),
            // the site's whole line (our kernel's own text), runs of blanks collapsed
            text: {
                let start = text[..r.start].rfind('\n').map(|i| i + 1).unwrap_or(0);
                let line = text[start..].lines().next().unwrap_or("");
                line.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(120).collect()
            },
        })
        .collect();
    let manifest =
        validator.kernels().for_source(rel).ok_or_else(|| anyhow::anyhow!("{rel} is no kernel's source"))?.name.clone();
    let req = Request {
        pattern: &p.id,
        path: rel,
        kernel: &manifest,
        values: values.to_vec(),
        sites,
        limits: o.limits,
        rule: o.rule,
    };
    let render_with = |rws: &[Rewrite], a: &Assignment| -> kidiom_validator::Result<String> {
        let choices: Vec<_> = a.iter().zip(&ranges).filter_map(|(v, r)| v.map(|v| (r.clone(), &rws[v]))).collect();
        Ok(kidiom_rewriter::rewrite_sites(&choices, Lang::Python, text, &tree, rel)?
            .map(|o| o.text)
            .unwrap_or_else(|| text.to_string()))
    };
    let render = |a: &Assignment| render_with(&rws, a);
    // what is measured: the same kernel in its current spelling (`allow_tf32=False` as
    // `input_precision="ieee"`), so the sweep's cache, keyed by bytes, measures it once for both
    let measured_rws = respelled_rewrites(p, values)?;
    let measure_text = |a: &Assignment| render_with(measured_rws.as_deref().unwrap_or(&rws), a);
    (o.progress)(format!(
        "searching {} site{} x {} value{} of {} in {rel}",
        ranges.len(),
        if ranges.len() == 1 { "" } else { "s" },
        values.len(),
        if values.len() == 1 { "" } else { "s" },
        p.id
    ));
    let s = validator.search_sites(&req, text, o.jobs, o.measured, measure_text)?;
    // the whole search, as the record stores it
    let summary: SiteSummary = serde_json::from_value(serde_json::to_value(&s)?)?;
    let mut cands = Vec::new();
    for (i, pt) in s.points.iter().enumerate() {
        let a = &pt.measured.assignment;
        let fixing_all = pt.is(Role::AllSites) && a.first().copied().flatten().is_some_and(|v| s.fixing.contains(&v));
        if pt.is(Role::Baseline) || !(pt.is(Role::Front) || pt.is(Role::Chosen) || fixing_all) {
            continue;
        }
        let out = render(a)?;
        if out == text {
            continue;
        }
        let one_value = a.iter().flatten().next().filter(|v| a.iter().flatten().all(|w| w == *v));
        let value = match one_value {
            Some(&v) if a.iter().all(Option::is_some) => values[v].clone(),
            _ => s.describe(a),
        };
        let measured = measure_text(a)?;
        let provenance = Provenance::of_pattern(p, Some(&value)).with_search(SearchOrigin::Sites(SiteOrigin {
            point: Some(i),
            roles: serde_json::from_value(serde_json::to_value(&pt.roles)?)?,
            assignment: s.describe(a),
            summary: summary.clone(),
            measured_blob: (measured != out).then(|| blob_id(measured.as_bytes())),
        }));
        cands.push(proposed(p, rel, text, &out, value, a.iter().flatten().count() as u64, provenance));
    }
    Ok(Some((s, cands)))
}

/// The pattern's rewrites per value in the current spelling of its argument
/// ([`kidiom_rewriter::respelled`]), when it has an older one (`None`: it has not).
fn respelled_rewrites(p: &Pattern, values: &[String]) -> Result<Option<Vec<Rewrite>>> {
    let Some((after, mapped)) = kidiom_rewriter::respelled(p.language, &p.after, values) else { return Ok(None) };
    let spec = RewriteSpec { after, ..RewriteSpec::from(p) };
    Ok(Some(mapped.iter().map(|v| Rewrite::new(&spec, Some(v))).collect::<Result<_, _>>()?))
}

/// A proposed candidate of `p` rewriting `rel` from `text` to `out`.
fn proposed(
    p: &Pattern,
    rel: &str,
    text: &str,
    out: &str,
    value: String,
    sites: u64,
    provenance: Provenance,
) -> Candidate {
    let diff = kidiom_rewriter::unified(rel, text, out, 3);
    Candidate {
        value: Some(value),
        sites,
        ..Candidate::new(&p.id, rel, diff, (blob_id(text.as_bytes()), blob_id(out.as_bytes())), provenance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_literals_resolved_names_or_writable_names() {
        use kidiom_patterns::ValueCount;
        let mut p = Pattern::usage("p", Lang::Python, "tl.dot($$$A)", "tl.dot($$$A, out_dtype=$V)", &["tl.float32"]);
        assert_eq!(values(&p, None, None), ["tl.float32"], "a writable name of Triton's is its own value");
        p.values = vec![
            ValueCount {
                value: "PREC".into(),
                count: 9,
                resolved: None,
                literals: vec!["'tf32'".into(), "\"ieee\"".into()],
            },
            ValueCount { value: "'ieee'".into(), count: 3, resolved: None, literals: vec![] },
            ValueCount { value: "LOCAL_NAME".into(), count: 2, resolved: None, literals: vec![] },
        ];
        assert_eq!(values(&p, None, None), ["\"tf32\"", "\"ieee\""]);
        assert_eq!(values(&p, Some("\"bf16x3\""), None), ["\"bf16x3\""]);
        p.values.clear();
        assert_eq!(
            values(&p, None, Some("\"ieee\"")),
            ["\"ieee\""],
            "the rewrite's own value when the histogram has none"
        );
        assert!(values(&p, None, None).is_empty());
    }

    #[test]
    fn quotes_are_one_value() {
        let mut p = Pattern::usage("p", Lang::Python, "tl.dot($$$A)", "tl.dot($$$A, input_precision=$V)", &["'ieee'"]);
        p.values.push(kidiom_patterns::ValueCount {
            value: "\"ieee\"".into(),
            count: 1,
            resolved: None,
            literals: vec![],
        });
        assert_eq!(values(&p, None, None), ["\"ieee\""]);
    }
}
