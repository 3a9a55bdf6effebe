//! Rules: what generalization hands back. A safe candidate becomes a
//! [`Rule`] with its support per corpus, hole values, examples, commits,
//! category, id, title, rationale and score.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kidiom_syntax::Lang;

use super::generalizer::{Generalizer, RuleCandidate};
use super::naming::{categorize, change_words, keyword_change, make_id, one_line, short, unique_id};
use super::pattern::{self, Binds};
use super::{CommitMeta, Rule, Safety};
use crate::idiom::{IdiomExample, Support};

impl Safety {
    /// Edits made over all edits the rule would make on its training
    /// files (0 when it would make none).
    pub(super) fn precision(&self) -> f64 {
        let total = self.true_edits + self.false_edits;
        if total == 0 { 0.0 } else { self.true_edits as f64 / total as f64 }
    }
}

/// A corpus as rules name it: its name and revision.
pub(super) struct CorpusName {
    pub name: String,
    pub revision: String,
}

/// Turns safe candidates into rules (in candidate order; a template
/// already made from another bucket or specialization is left out).
/// `opportunities[c][k]` counts candidate `c`'s sites in corpus `k`.
pub(super) fn assemble(
    g: &Generalizer<'_>,
    corpora: &[CorpusName],
    cands: Vec<RuleCandidate>,
    opportunities: &[Vec<u64>],
) -> Vec<Rule> {
    let mut rules: Vec<Rule> = Vec::new();
    let mut seen: HashMap<(Lang, String, String), usize> = HashMap::new();
    let mut ids: BTreeSet<String> = BTreeSet::new();
    for (ri, mut c) in cands.into_iter().enumerate() {
        // The text the applying matcher checked, when it did.
        let Some((before, after)) = c.text.take().or_else(|| render(g, &c)) else { continue };
        if seen.contains_key(&(c.lang, before.clone(), after.clone())) {
            // The same template from another bucket or specialization: keep the first.
            continue;
        }
        let commits = commits_of(g, &c);
        let support = support(g, corpora, &c, &opportunities[ri]);
        let values = values(g, &c);
        let examples = examples(g, corpora, &c);
        let change = change_words(&before, &after);
        let keywords = c.items.first().and_then(|&i| g.ex(&c, i)).map(keyword_change).unwrap_or_default();
        let category = categorize(&change, &keywords, &commits);
        let score = score(&commits, &support, &c.safety);
        let id = unique_id(&mut ids, &make_id(c.lang, &before, &change));
        let title = format!("`{}` -> `{}`", short(&before, 50), short(&after, 60));
        let rationale = rationale(&c, &commits, &support);
        seen.insert((c.lang, before.clone(), after.clone()), rules.len());
        rules.push(Rule {
            id,
            lang: c.lang,
            category,
            title,
            rationale,
            before,
            after,
            support,
            values,
            examples,
            commits,
            score,
            safety: c.safety,
        });
    }
    rules
}

/// A rule's score: recurrence (commits, occurrences, corpora) times its
/// precision on replay, plus a little for commits whose messages say why.
pub(super) fn score(commits: &[CommitMeta], support: &[Support], safety: &Safety) -> f64 {
    let occurrences: u64 = support.iter().map(|s| s.occurrences).sum();
    let total = safety.true_edits + safety.false_edits;
    let precision = if total == 0 { 1.0 } else { safety.true_edits as f64 / total as f64 };
    let hinted = commits.iter().filter(|m| !m.tags.is_empty()).count() as f64 / commits.len().max(1) as f64;
    ((commits.len() as f64).ln_1p() * 2.0 + (occurrences as f64).ln_1p() + (support.len().saturating_sub(1)) as f64)
        * precision
        + 0.5 * hinted
}

/// A candidate's templates in ast-grep syntax, rendered from its first
/// example; `None` when that example no longer validates.
pub(super) fn render(g: &Generalizer<'_>, c: &RuleCandidate) -> Option<(String, String)> {
    let first = c.items.first().and_then(|&i| g.ex(c, i))?;
    let bb = c.template.validate(first)?;
    let before = pattern::render(&first.before, 0, &bb, &c.template.seq);
    let mut ba = Binds::new(c.template.holes());
    if !c.template.after.matches(&first.after, 0, &mut ba) {
        return None;
    }
    let after = pattern::render(&first.after, 0, &ba, &c.template.seq);
    Some((before, after))
}

/// A candidate's commits, oldest first.
fn commits_of(g: &Generalizer<'_>, c: &RuleCandidate) -> Vec<CommitMeta> {
    let mut commits: BTreeMap<(i64, String), CommitMeta> = BTreeMap::new();
    for &i in &c.items {
        let m = &g.commit(i).commit;
        commits.insert((m.time, m.id.clone()), m.clone());
    }
    commits.into_values().collect()
}

/// Support per corpus that has examples of the candidate.
fn support(g: &Generalizer<'_>, corpora: &[CorpusName], c: &RuleCandidate, opportunities: &[u64]) -> Vec<Support> {
    let mut out = Vec::new();
    for (ci, corpus) in corpora.iter().enumerate() {
        let mine: Vec<usize> = c.items.iter().copied().filter(|&i| g.items[i].corpus == ci).collect();
        if mine.is_empty() {
            continue;
        }
        let files: BTreeSet<&str> = mine.iter().map(|&i| g.edit(i).path.as_str()).collect();
        out.push(Support {
            corpus: corpus.name.clone(),
            revision: corpus.revision.clone(),
            occurrences: mine.len() as u64,
            files: files.len() as u64,
            opportunities: opportunities[ci],
        });
    }
    out
}

/// Hole values: the after-only values when the rule adds some (the values
/// a rewrite chooses from), else the values bound on the before side; the
/// twelve most frequent.
pub(super) fn values(g: &Generalizer<'_>, c: &RuleCandidate) -> Vec<(String, u64)> {
    let mut values: BTreeMap<String, u64> = BTreeMap::new();
    for &i in &c.items {
        let Some(ex) = g.ex(c, i) else { continue };
        let Some((b, fresh)) = c.template.validate_full(ex) else { continue };
        if c.template.has_fresh() {
            for v in fresh.iter().flatten() {
                *values.entry(v.chars().take(80).collect()).or_default() += 1;
            }
            continue;
        }
        for n in b.one.iter().flatten() {
            let v: String = ex.before.text(*n).chars().take(80).collect();
            *values.entry(v).or_default() += 1;
        }
    }
    let mut values: Vec<(String, u64)> = values.into_iter().collect();
    values.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    values.truncate(12);
    values
}

/// Up to five examples, one per commit.
fn examples(g: &Generalizer<'_>, corpora: &[CorpusName], c: &RuleCandidate) -> Vec<IdiomExample> {
    let mut examples = Vec::new();
    let mut used = BTreeSet::new();
    for &i in &c.items {
        if examples.len() >= 5 {
            break;
        }
        let k = g.commit(i);
        if !used.insert(&k.commit.id) {
            continue;
        }
        let e = g.edit(i);
        let (b, a) = match (&e.context, c.template.lifted) {
            (Some(x), true) => (x.before.as_str(), x.after.as_str()),
            _ => (e.before.as_str(), e.after.as_str()),
        };
        let snippet = format!("{}  =>  {}", one_line(b), one_line(a));
        examples.push(IdiomExample {
            corpus: corpora[g.items[i].corpus].name.clone(),
            path: e.path.clone(),
            line: e.line,
            snippet: snippet.chars().take(240).collect(),
        });
    }
    examples
}

/// Why a rule is believed: its commits, replay and messages.
fn rationale(c: &RuleCandidate, commits: &[CommitMeta], support: &[Support]) -> String {
    let corpora_names: Vec<&str> = support.iter().map(|s| s.corpus.as_str()).collect();
    let occurrences: u64 = support.iter().map(|s| s.occurrences).sum();
    let mut rationale = format!(
        "Made by hand in {} commits of {} ({} edits in {} files), e.g. {} \"{}\". Replayed on its training files, \
         the rule makes {} of the commits' edits and {} they did not make{}; {} edits of the same shape there are \
         not covered. {} of {} commits say why in their message{}.",
        commits.len(),
        corpora_names.join(", "),
        occurrences,
        support.iter().map(|s| s.files).sum::<u64>(),
        commits.last().map(|m| &m.id[..m.id.len().min(10)]).unwrap_or(""),
        commits.last().map(|m| m.summary.as_str()).unwrap_or(""),
        c.safety.true_edits,
        c.safety.false_edits,
        match (c.safety.specialized, c.template.lifted) {
            (true, true) => " (lifted to the enclosing statement and specialized to the value its commits used)",
            (false, true) => " (lifted to the enclosing statement: the smaller rule was unsafe)",
            (true, false) => " (specialized to the value its commits used)",
            (false, false) => "",
        },
        c.safety.missed_edits,
        commits.iter().filter(|m| !m.tags.is_empty()).count(),
        commits.len(),
        {
            let t: BTreeSet<&str> = commits.iter().flat_map(|m| m.tags.iter().map(String::as_str)).collect();
            if t.is_empty() { String::new() } else { format!(" ({})", t.into_iter().collect::<Vec<_>>().join(", ")) }
        }
    );
    let mut cut = rationale.len().min(2000);
    while !rationale.is_char_boundary(cut) {
        cut -= 1;
    }
    rationale.truncate(cut);
    rationale
}
