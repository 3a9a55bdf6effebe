//! The generalizer: the concrete edits of a run become safe, recurring
//! rules.
//!
//! [`Generalizer::new`] indexes every edit of every corpus and rebuilds its
//! trees; then, in order, [`Generalizer::candidates`] buckets and clusters
//! them into templates that every example validates, [`Generalizer::make_safe`]
//! replays the candidates on their training files and specializes, lifts or
//! drops the unsafe ones, [`Generalizer::count_missed`] counts the edits of
//! the same shape they do not cover, [`Generalizer::check_applied`] has the
//! matcher that applies rules reproduce their examples ([`super::check`]),
//! and [`super::rules::assemble`] names and scores what is left.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use kidiom_syntax::Lang;
use rayon::prelude::*;
use serde::Serialize;

use super::alpha;
use super::antiunify::{self, Ex, Template};
use super::blobs::{Blob, BlobCache};
use super::check::{self, CheckFailure, RuleText, TrainingExample};
use super::mine::with_repo;
use super::pattern::{Binds, Pat};
use super::replay;
use super::rules::{self, CorpusName};
use super::safety;
use super::tree::Tree;
use super::{CommitEdits, ConcreteEdit, HistoryConfig, Rule, Safety};
use crate::corpus::Corpus;

/// One corpus's input to [`generalize`].
pub struct CorpusHistory<'a> {
    /// The opened corpus (its repository is read for safety replay and
    /// opportunities).
    pub corpus: &'a Corpus,
    /// Its mined commits.
    pub commits: &'a [CommitEdits],
}

/// Counts from [`generalize`].
#[derive(Debug, Clone, Default, Serialize)]
pub struct GeneralizeStats {
    /// Concrete edits in.
    pub edits: u64,
    /// Shape buckets.
    pub buckets: u64,
    /// Clusters formed.
    pub clusters: u64,
    /// Clusters with enough commits to be candidates.
    pub candidates: u64,
    /// Examples that a candidate's template failed to re-match or reproduce (removed).
    pub invalid_examples: u64,
    /// Candidates specialized to become safe.
    pub specialized: u64,
    /// Candidates dropped as unsafe.
    pub unsafe_dropped: u64,
    /// Safe rules found by lifting an unsafe candidate to the enclosing
    /// statement.
    pub lifted: u64,
    /// Training file pairs replayed.
    pub replayed_files: u64,
    /// Examples the matcher that applies rules was asked to reproduce
    /// (at most [`check::MAX_CHECKED_EXAMPLES`] per rule).
    pub apply_checked: u64,
    /// Of those, the ones it did not reproduce (removed from their rule).
    pub apply_check_failed: u64,
    /// The failures by reason (`no-rewrite`, `no-site`, `differs`).
    pub apply_check_failures: BTreeMap<String, u64>,
    /// Rules dropped because the applying matcher reproduced their
    /// examples in fewer than `min_commits` commits.
    pub apply_check_dropped: u64,
    /// Unsafe candidates kept because their change only adds a per-site
    /// hint (a precision, a cache policy), their false edits recorded.
    pub site_hints_kept: u64,
    /// Rules merged into another that makes the same change with other
    /// bound names (locals, parameters).
    pub renamed_merged: u64,
    /// Seconds spent clustering, replaying and counting opportunities.
    pub cluster_seconds: f64,
    /// Seconds spent in the safety replay.
    pub replay_seconds: f64,
    /// Seconds spent counting opportunities at the corpora's revisions.
    pub opportunity_seconds: f64,
    /// Seconds spent in the check by the applying matcher.
    pub apply_check_seconds: f64,
}

/// What [`generalize`] produced.
#[derive(Debug, Clone, Default)]
pub struct HistoryResult {
    /// Rules, best first.
    pub rules: Vec<Rule>,
    /// Counts.
    pub stats: GeneralizeStats,
}

/// Generalizes the concrete edits of `corpora` into safe, recurring rules.
/// Training files and the corpora's revisions are parsed through `blobs`
/// (the cache mining used, when it is still warm). Every rule kept is one
/// that the rewrite engine (the matcher that applies rules) reproduces on examples of
/// at least `cfg.min_commits` of its commits.
pub fn generalize(corpora: &[CorpusHistory<'_>], cfg: &HistoryConfig, blobs: &BlobCache) -> HistoryResult {
    run(corpora, cfg, blobs, true)
}

/// [`generalize`] with every example taken as reproduced: generalization as
/// it was before the rewrite engine had a say (tests compare the two).
pub fn generalize_unchecked(corpora: &[CorpusHistory<'_>], cfg: &HistoryConfig, blobs: &BlobCache) -> HistoryResult {
    run(corpora, cfg, blobs, false)
}

/// The run of [`generalize`]; `engine_check` puts the rules to the rewrite engine.
fn run(corpora: &[CorpusHistory<'_>], cfg: &HistoryConfig, blobs: &BlobCache, engine_check: bool) -> HistoryResult {
    let mut stats = GeneralizeStats::default();
    let t0 = Instant::now();
    let g = Generalizer::new(corpora, cfg, blobs);
    stats.edits = g.items.len() as u64;
    let cands = g.candidates(&mut stats);
    stats.cluster_seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut safe = g.make_safe(cands, &mut stats);
    stats.replay_seconds = t1.elapsed().as_secs_f64();
    g.count_missed(&mut safe);
    let tc = Instant::now();
    let safe = g.check_applied(safe, engine_check, &mut stats);
    stats.apply_check_seconds = tc.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let opportunities = replay::count_opportunities(corpora, &safe, blobs, &cfg.limits);
    stats.opportunity_seconds = t2.elapsed().as_secs_f64();
    let names: Vec<CorpusName> = corpora
        .iter()
        .map(|c| CorpusName { name: c.corpus.manifest.name.clone(), revision: c.corpus.revision.clone() })
        .collect();
    let mut rules = rules::assemble(&g, &names, safe, &opportunities);
    rules.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    // The same change spelled with other local names is one rule.
    let (mut rules, merged) = alpha::merge_renamed(rules);
    stats.renamed_merged = merged;
    rules.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.id.cmp(&b.id)));
    HistoryResult { rules, stats }
}

/// Groups per bucket at most (the most frequent).
const MAX_GROUPS_PER_BUCKET: usize = 1_500;
/// Clusters per bucket at most.
const MAX_CLUSTERS_PER_BUCKET: usize = 200;

/// An edit's place: corpus, commit and edit indices.
#[derive(Debug, Clone, Copy)]
pub(super) struct Item {
    pub corpus: usize,
    pub commit: usize,
    pub edit: usize,
}

/// A rule in the making: its template, the edits (item indices) it was
/// generalized from, its bucket and how it fared in the replay; once
/// checked by the applying matcher, the text it checked.
pub(super) struct RuleCandidate {
    pub template: Template,
    pub items: Vec<usize>,
    pub bucket: u64,
    pub lang: Lang,
    pub safety: Safety,
    /// Before and after in ast-grep syntax.
    pub text: Option<(String, String)>,
}

/// A bucket's clusters: language, bucket key, (template, edit indices).
type Clustered = (Lang, u64, Vec<(Template, Vec<usize>)>);

/// A training file pair: path, language and the candidates trained on it.
type TrainingFile = (String, Lang, Vec<usize>);

/// A training before-file to check rules in: corpus, blob and language.
type CheckFile<'a> = (usize, &'a str, Lang);

/// A checked example: candidate, position in its items, and the outcome
/// (`None`: it could not be put to the matcher).
type CheckOutcome = (usize, usize, Option<Result<(), CheckFailure>>);

/// The training file pairs of one path (indices), each with its commit's
/// age, oldest first once sorted.
type Chain = Vec<(std::cmp::Reverse<usize>, usize)>;

/// The edits of a run, indexed, with their trees. Holds no repository
/// (threads cannot share one), so every step may run in parallel.
pub(super) struct Generalizer<'a> {
    cfg: &'a HistoryConfig,
    blobs: &'a BlobCache,
    /// Each corpus's mined commits.
    sets: Vec<&'a [CommitEdits]>,
    /// Each corpus's repository, for reading training files.
    repos: Vec<Option<PathBuf>>,
    /// Every edit of every corpus.
    pub items: Vec<Item>,
    /// Each edit's example, and its enclosing statement's.
    exs: Vec<Option<Ex<'a>>>,
    ctx_exs: Vec<Option<Ex<'a>>>,
    /// Each edit's shape bucket.
    bucket_of: Vec<u64>,
    /// The edits of each training file pair: (corpus, before blob, after blob).
    made: HashMap<(usize, &'a str, &'a str), Vec<usize>>,
}

impl<'a> Generalizer<'a> {
    fn new(corpora: &[CorpusHistory<'a>], cfg: &'a HistoryConfig, blobs: &'a BlobCache) -> Generalizer<'a> {
        let mut items = Vec::new();
        for (ci, c) in corpora.iter().enumerate() {
            for (ki, k) in c.commits.iter().enumerate() {
                for ei in 0..k.edits.len() {
                    items.push(Item { corpus: ci, commit: ki, edit: ei });
                }
            }
        }
        let sets: Vec<&'a [CommitEdits]> = corpora.iter().map(|c| c.commits).collect();
        let edit_of = |it: &Item| -> &'a ConcreteEdit { &sets[it.corpus][it.commit].edits[it.edit] };
        let exs: Vec<Option<Ex<'a>>> = items
            .par_iter()
            .map(|it| {
                let e = edit_of(it);
                Some(Ex {
                    before: Tree::from_flat(&e.before, &e.before_tree)?,
                    after: Tree::from_flat(&e.after, &e.after_tree)?,
                })
            })
            .collect();
        let ctx_exs: Vec<Option<Ex<'a>>> = items
            .par_iter()
            .map(|it| {
                let c = edit_of(it).context.as_ref()?;
                Some(Ex {
                    before: Tree::from_flat(&c.before, &c.before_tree)?,
                    after: Tree::from_flat(&c.after, &c.after_tree)?,
                })
            })
            .collect();
        let bucket_of = exs.iter().map(|ex| ex.as_ref().map_or(0, antiunify::bucket_key)).collect();
        let mut made: HashMap<(usize, &'a str, &'a str), Vec<usize>> = HashMap::new();
        for (i, it) in items.iter().enumerate() {
            let e = edit_of(it);
            made.entry((it.corpus, e.before_blob.as_str(), e.after_blob.as_str())).or_default().push(i);
        }
        let repos = corpora.iter().map(|c| c.corpus.repository().map(|r| r.path().to_path_buf())).collect();
        Generalizer { cfg, blobs, sets, repos, items, exs, ctx_exs, bucket_of, made }
    }

    /// Edit `i`.
    pub(super) fn edit(&self, i: usize) -> &'a ConcreteEdit {
        let it = self.items[i];
        &self.sets[it.corpus][it.commit].edits[it.edit]
    }

    /// The commit of edit `i`.
    pub(super) fn commit(&self, i: usize) -> &'a CommitEdits {
        let it = self.items[i];
        &self.sets[it.corpus][it.commit]
    }

    fn commit_key(&self, i: usize) -> (usize, usize) {
        (self.items[i].corpus, self.items[i].commit)
    }

    fn commit_count(&self, members: &[usize]) -> usize {
        members.iter().map(|&i| self.commit_key(i)).collect::<BTreeSet<_>>().len()
    }

    /// Edit `i`'s example at the candidate's level (its enclosing statement
    /// for a lifted candidate).
    pub(super) fn ex(&self, c: &RuleCandidate, i: usize) -> Option<&Ex<'a>> {
        if c.template.lifted { self.ctx_exs[i].as_ref() } else { self.exs[i].as_ref() }
    }

    /// The groups to cluster, most commits first, then most edits.
    fn top_groups(&self, mut gs: Vec<Vec<usize>>) -> Vec<Vec<usize>> {
        gs.sort_by_key(|g| (std::cmp::Reverse(self.commit_count(g)), std::cmp::Reverse(g.len()), g[0]));
        gs.truncate(MAX_GROUPS_PER_BUCKET);
        gs
    }

    /// Buckets by shape, groups by exact change, clusters each bucket's
    /// groups by anti-unification; the clusters with enough commits whose
    /// templates every example validates are the candidates.
    fn candidates(&self, stats: &mut GeneralizeStats) -> Vec<RuleCandidate> {
        let mut buckets: HashMap<(Lang, u64), BTreeMap<u64, Vec<usize>>> = HashMap::new();
        for (i, ex) in self.exs.iter().enumerate() {
            let Some(ex) = ex else { continue };
            let key = (self.edit(i).lang, self.bucket_of[i]);
            buckets.entry(key).or_default().entry(antiunify::group_key(ex)).or_default().push(i);
        }
        stats.buckets = buckets.len() as u64;
        let mut bucket_list: Vec<_> = buckets.into_iter().collect();
        bucket_list.sort_by_key(|(k, _)| *k);
        let clustered: Vec<Clustered> = bucket_list
            .par_iter()
            .filter_map(|((lang, b), groups)| {
                let all: Vec<usize> = groups.values().flatten().copied().collect();
                if self.commit_count(&all) < self.cfg.min_commits {
                    return None;
                }
                let gs = self.top_groups(groups.values().cloned().collect());
                let reps: Vec<&Ex<'_>> = gs.iter().filter_map(|g| self.exs[g[0]].as_ref()).collect();
                if reps.len() != gs.len() {
                    return None;
                }
                let cs = antiunify::cluster(&reps, self.cfg.max_holes, MAX_CLUSTERS_PER_BUCKET);
                let out = cs
                    .into_iter()
                    .map(|c| (c.template, c.groups.iter().flat_map(|&g| gs[g].clone()).collect()))
                    .collect();
                Some((*lang, *b, out))
            })
            .collect();
        let mut cands: Vec<RuleCandidate> = Vec::new();
        for (lang, bucket, cs) in clustered {
            for (template, members) in cs {
                stats.clusters += 1;
                if !template.usable(self.cfg.max_holes) {
                    continue;
                }
                if self.commit_count(&members) < self.cfg.min_commits {
                    continue;
                }
                stats.candidates += 1;
                let Some(valid) = self.validated(&template, &members, &self.exs, stats) else { continue };
                let safety = Safety { validated: valid.len() as u64, ..Default::default() };
                cands.push(RuleCandidate { template, items: valid, bucket, lang, safety, text: None });
            }
        }
        cands
    }

    /// The members whose example the template re-matches and reproduces;
    /// `None` when they no longer span enough commits. Counts the examples
    /// that fail.
    fn validated(
        &self,
        template: &Template,
        members: &[usize],
        exs: &[Option<Ex<'_>>],
        stats: &mut GeneralizeStats,
    ) -> Option<Vec<usize>> {
        let valid: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&i| exs[i].as_ref().is_some_and(|ex| template.validate(ex).is_some()))
            .collect();
        stats.invalid_examples += (members.len() - valid.len()) as u64;
        (self.commit_count(&valid) >= self.cfg.min_commits).then_some(valid)
    }

    /// Replays candidates on their training file pairs, counting true and
    /// false edits; returns each candidate's sites.
    fn replay(&self, cands: &mut [RuleCandidate], stats: &mut GeneralizeStats) -> Vec<Vec<safety::Site>> {
        let mut pairs: BTreeMap<(usize, String, String), TrainingFile> = BTreeMap::new();
        for (ci, c) in cands.iter().enumerate() {
            for &i in &c.items {
                let e = self.edit(i);
                let entry = pairs
                    .entry((self.items[i].corpus, e.before_blob.clone(), e.after_blob.clone()))
                    .or_insert_with(|| (e.path.clone(), e.lang, Vec::new()));
                if entry.2.last() != Some(&ci) {
                    entry.2.push(ci);
                }
            }
        }
        stats.replayed_files += pairs.len() as u64;
        let pair_list: Vec<_> = pairs.into_iter().collect();
        // The training files of one path, oldest first: each version is
        // re-parsed from the one before it.
        let mut chains: BTreeMap<(usize, &str), Chain> = BTreeMap::new();
        for (pi, ((corpus, ob, nb), (path, _, _))) in pair_list.iter().enumerate() {
            let newest = self.made.get(&(*corpus, ob.as_str(), nb.as_str())).and_then(|m| m.first());
            let commit = newest.map_or(0, |&i| self.items[i].commit);
            chains.entry((*corpus, path.as_str())).or_default().push((std::cmp::Reverse(commit), pi));
        }
        let chains: Vec<Chain> = chains
            .into_values()
            .map(|mut c| {
                c.sort_unstable();
                c
            })
            .collect();
        let cands_ref: &[RuleCandidate] = cands;
        let replay_pair = |pi: usize, near: Option<&Blob>| {
            let ((corpus, ob, nb), (_path, lang, cis)) = &pair_list[pi];
            let mine = self.made.get(&(*corpus, ob.as_str(), nb.as_str()));
            let changes: Vec<safety::Change<'_>> = mine
                .into_iter()
                .flatten()
                .filter_map(|&i| {
                    let e = self.edit(i);
                    let ex = self.exs[i].as_ref()?;
                    Some(safety::Change {
                        start: e.start,
                        end: e.start + e.before.len() as u32,
                        after: ex.after.tokens(0),
                    })
                })
                .collect();
            let contexts: Vec<safety::Change<'_>> = mine
                .into_iter()
                .flatten()
                .filter_map(|&i| {
                    let c = self.edit(i).context.as_ref()?;
                    let ex = self.ctx_exs[i].as_ref()?;
                    Some(safety::Change {
                        start: c.start,
                        end: c.start + c.before.len() as u32,
                        after: ex.after.tokens(0),
                    })
                })
                .collect();
            let input = (cis.as_slice(), cands_ref, changes.as_slice(), contexts.as_slice());
            let repo = self.repos[*corpus].as_deref();
            replay::replay_file(repo, (self.blobs, near), ob, *lang, input, &self.cfg.limits)
        };
        let mut replays: Vec<(usize, Vec<(usize, safety::Replay)>)> = chains
            .par_iter()
            .flat_map_iter(|chain| {
                let mut near: Option<Arc<Blob>> = None;
                let mut out = Vec::with_capacity(chain.len());
                for &(_, pi) in chain {
                    let (res, blob) = replay_pair(pi, near.as_deref());
                    near = blob.or(near);
                    out.push((pi, res));
                }
                out
            })
            .collect();
        replays.sort_unstable_by_key(|(pi, _)| *pi);
        let mut sites: Vec<Vec<safety::Site>> = vec![Vec::new(); cands.len()];
        for (_, res) in replays {
            for (ci, r) in res {
                cands[ci].safety.true_edits += r.true_sites.len() as u64;
                cands[ci].safety.false_edits += r.false_sites.len() as u64;
                sites[ci].extend(r.true_sites.into_iter().map(|s| safety::Site { made: true, ..s }));
                sites[ci].extend(r.false_sites);
            }
        }
        sites
    }

    /// Specializes an unsafe candidate: the safe specializations, each with
    /// its true and false edits counted from the replayed sites.
    fn specialize(&self, c: &RuleCandidate, sites: &[safety::Site]) -> Vec<RuleCandidate> {
        let values: Vec<Vec<Option<(u64, Pat)>>> = c
            .items
            .iter()
            .map(|&i| {
                let Some(ex) = self.ex(c, i) else { return Vec::new() };
                let b = c.template.validate(ex).unwrap_or_else(|| Binds::new(0));
                b.one
                    .iter()
                    .map(|o| o.map(|n| (ex.before.nodes[n as usize].hash, Pat::concrete(&ex.before, n))))
                    .collect()
            })
            .collect();
        let commit_ids: Vec<usize> =
            c.items.iter().map(|&i| self.items[i].corpus * 1_000_000 + self.items[i].commit).collect();
        let falses: Vec<&safety::Site> = sites.iter().filter(|s| !s.made).collect();
        let specs = safety::specialize(&c.template, &values, &commit_ids, &falses, self.cfg.min_commits);
        specs
            .into_iter()
            .map(|s| {
                let kept: Vec<usize> = s.keep.iter().map(|&k| c.items[k]).collect();
                let true_edits =
                    sites.iter().filter(|x| x.made && x.holes.get(s.hole).copied().flatten() == Some(s.value)).count();
                let safety = Safety {
                    true_edits: true_edits as u64,
                    false_edits: 0,
                    specialized: true,
                    validated: kept.len() as u64,
                    missed_edits: 0,
                };
                RuleCandidate { template: s.template, items: kept, bucket: c.bucket, lang: c.lang, safety, text: None }
            })
            .collect()
    }

    /// Getafix's hierarchy: each unsafe candidate clustered again one level
    /// up, at the statement around each of its edits, which carries the
    /// context that tells the sites the authors changed from those they did
    /// not. Returns the lifted candidates and, for each, the precision of
    /// the candidate it came from.
    fn lift(&self, unsafe_: &[RuleCandidate], stats: &mut GeneralizeStats) -> (Vec<RuleCandidate>, Vec<f64>) {
        let mut lifted: Vec<RuleCandidate> = Vec::new();
        let mut lifted_from: Vec<f64> = Vec::new();
        for c in unsafe_ {
            let mut seen: BTreeSet<(usize, &str, u32)> = BTreeSet::new();
            let mut groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
            for &i in &c.items {
                let (Some(ctx), Some(ex)) = (self.edit(i).context.as_ref(), self.ctx_exs[i].as_ref()) else {
                    continue;
                };
                if seen.insert((self.items[i].corpus, self.edit(i).before_blob.as_str(), ctx.start)) {
                    groups.entry(antiunify::group_key(ex)).or_default().push(i);
                }
            }
            let gs = self.top_groups(groups.into_values().collect());
            let reps: Vec<&Ex<'_>> = gs.iter().filter_map(|g| self.ctx_exs[g[0]].as_ref()).collect();
            if reps.len() != gs.len() {
                continue;
            }
            for cl in antiunify::cluster(&reps, self.cfg.max_holes, MAX_CLUSTERS_PER_BUCKET) {
                let mut template = cl.template;
                template.lifted = true;
                if !template.usable(self.cfg.max_holes) {
                    continue;
                }
                let members: Vec<usize> = cl.groups.iter().flat_map(|&g| gs[g].clone()).collect();
                let Some(valid) = self.validated(&template, &members, &self.ctx_exs, stats) else { continue };
                let safety = Safety { validated: valid.len() as u64, ..Default::default() };
                lifted.push(RuleCandidate {
                    template,
                    items: valid,
                    bucket: c.bucket,
                    lang: c.lang,
                    safety,
                    text: None,
                });
                lifted_from.push(c.safety.precision());
            }
        }
        (lifted, lifted_from)
    }

    /// Replays the candidates; keeps the safe ones, specializes, lifts or
    /// drops the unsafe ones. What stays unsafe is kept only at the minimum
    /// precision, its false edits recorded.
    fn make_safe(&self, mut cands: Vec<RuleCandidate>, stats: &mut GeneralizeStats) -> Vec<RuleCandidate> {
        let sites = self.replay(&mut cands, stats);
        let mut safe: Vec<RuleCandidate> = Vec::new();
        let mut unsafe_: Vec<RuleCandidate> = Vec::new();
        for (ci, c) in cands.into_iter().enumerate() {
            if c.safety.false_edits == 0 {
                safe.push(c);
                continue;
            }
            let specs = self.specialize(&c, &sites[ci]);
            if !specs.is_empty() {
                stats.specialized += 1;
                safe.extend(specs);
                continue;
            }
            unsafe_.push(c);
        }
        let (mut lifted, lifted_from) = self.lift(&unsafe_, stats);
        if !lifted.is_empty() {
            let lsites = self.replay(&mut lifted, stats);
            for (li, c) in lifted.into_iter().enumerate() {
                if c.safety.false_edits == 0 {
                    stats.lifted += 1;
                    safe.push(c);
                    continue;
                }
                let specs = self.specialize(&c, &lsites[li]);
                if !specs.is_empty() {
                    stats.lifted += 1;
                    stats.specialized += 1;
                    safe.extend(specs);
                    continue;
                }
                // Still unsafe: kept, its false edits recorded, when the larger
                // context made it more precise than the rule it came from and
                // it reaches the minimum precision.
                let p = c.safety.precision();
                if p >= self.cfg.min_precision && p > lifted_from[li] {
                    stats.lifted += 1;
                    safe.push(c);
                }
            }
        }
        for c in unsafe_ {
            if c.safety.precision() >= self.cfg.min_precision {
                safe.push(c);
            } else if self.adds_site_hint(&c) {
                // Authors add a precision or a cache hint at the sites that
                // need it, not at every site of the shape: the other sites are
                // choices (the validator's site search makes them), not errors.
                stats.site_hints_kept += 1;
                safe.push(c);
            } else {
                stats.unsafe_dropped += 1;
            }
        }
        safe
    }

    /// Whether a candidate's change only adds optimizing keyword arguments
    /// to a Triton call (`input_precision=`, `allow_tf32=`, `eviction_policy=`,
    /// `cache_modifier=`: [`crate::classify::keyword_role`]), in every example:
    /// a per-site hint, which its authors add where they judge it pays.
    fn adds_site_hint(&self, c: &RuleCandidate) -> bool {
        let hint = |name: &str| {
            crate::classify::keyword_role(name).is_some_and(|r| r.category.is_optimization() && r.caveat.is_none())
        };
        if c.template.added.is_empty() || !c.template.added.iter().all(|(n, _)| hint(n)) {
            return false;
        }
        c.items.iter().all(|&i| self.ex(c, i).is_some_and(only_adds_keywords))
    }

    /// The check by the matcher that applies rules: each candidate's text
    /// is rendered once (the catalog gets that text), and up to
    /// [`check::MAX_CHECKED_EXAMPLES`] of its examples, one per commit
    /// first, are rewritten by the engine in their before-files (`engine_check`;
    /// without it every example counts as reproduced). Examples it
    /// does not reproduce are removed; a candidate is kept only when it
    /// reproduced examples of `min_commits` commits. Each file is read once
    /// for all the candidates trained on it; files are checked in parallel.
    fn check_applied(
        &self,
        mut cands: Vec<RuleCandidate>,
        engine_check: bool,
        stats: &mut GeneralizeStats,
    ) -> Vec<RuleCandidate> {
        let texts: Vec<Option<(String, String)>> = cands.par_iter().map(|c| rules::render(self, c)).collect();
        let values: Vec<Vec<(String, u64)>> = cands.par_iter().map(|c| rules::values(self, c)).collect();
        // (corpus, before blob, language) -> (candidate, position in its items)
        let mut by_file: BTreeMap<CheckFile<'_>, Vec<(usize, usize)>> = BTreeMap::new();
        for (ci, c) in cands.iter().enumerate() {
            if texts[ci].is_none() {
                continue;
            }
            let commits: Vec<(usize, usize)> = c.items.iter().map(|&i| self.commit_key(i)).collect();
            for slot in check::pick(&commits) {
                let i = c.items[slot];
                let e = self.edit(i);
                by_file.entry((self.items[i].corpus, e.before_blob.as_str(), e.lang)).or_default().push((ci, slot));
            }
        }
        let files: Vec<_> = by_file.into_iter().collect();
        let rule = |ci: usize| {
            texts[ci].as_ref().map(|(before, after)| RuleText {
                lang: cands[ci].lang,
                before,
                after,
                values: &values[ci],
            })
        };
        let results: Vec<CheckOutcome> = files
            .par_iter()
            .flat_map_iter(|(file, tasks)| self.check_file(*file, tasks, &cands, &rule, engine_check))
            .collect();
        let mut outcomes: Vec<Vec<Option<bool>>> = cands.iter().map(|c| vec![None; c.items.len()]).collect();
        for (ci, slot, r) in results {
            let Some(r) = r else { continue };
            stats.apply_checked += 1;
            if let Err(why) = r {
                stats.apply_check_failed += 1;
                *stats.apply_check_failures.entry(why.name().to_string()).or_default() += 1;
            }
            outcomes[ci][slot] = Some(r.is_ok());
        }
        let mut kept = Vec::with_capacity(cands.len());
        for (ci, (mut c, text)) in cands.drain(..).zip(texts).enumerate() {
            let commits: Vec<(usize, usize)> = c.items.iter().map(|&i| self.commit_key(i)).collect();
            let Some(keep) = check::verdict(&commits, &outcomes[ci], self.cfg.min_commits) else {
                stats.apply_check_dropped += 1;
                continue;
            };
            c.items = keep.into_iter().map(|k| c.items[k]).collect();
            c.safety.validated = c.items.len() as u64;
            c.text = text;
            kept.push(c);
        }
        kept
    }

    /// The check of the examples `tasks` (candidate, position in its
    /// items) whose before-file is blob `blob` of corpus `corpus`. `None`
    /// for an example that could not be put to the matcher (its file
    /// unreadable, its edit not where it says): it proves nothing.
    fn check_file<'r>(
        &self,
        (corpus, blob, lang): CheckFile<'_>,
        tasks: &[(usize, usize)],
        cands: &[RuleCandidate],
        rule: &(dyn Fn(usize) -> Option<RuleText<'r>> + Sync),
        engine_check: bool,
    ) -> Vec<CheckOutcome> {
        let unread = || tasks.iter().map(|&(ci, slot)| (ci, slot, None)).collect();
        let Some(repo) = self.repos[corpus].as_deref() else { return unread() };
        let Ok(oid) = git2::Oid::from_str(blob) else { return unread() };
        let Some(Some(b)) = with_repo(repo, |r| self.blobs.get(r, oid, lang, &self.cfg.limits)) else {
            return unread();
        };
        let (Ok(text), Ok(tree)) = (b.text(), self.blobs.tree(&b, None)) else { return unread() };
        tasks
            .iter()
            .map(|&(ci, slot)| {
                let c = &cands[ci];
                let i = c.items[slot];
                let e = self.edit(i);
                let (start, before) = match (&e.context, c.template.lifted) {
                    (Some(x), true) => (x.start as usize, x.before.as_str()),
                    _ => (e.start as usize, e.before.as_str()),
                };
                let range = start..start + before.len();
                let (Some(ex), Some(rule)) = (self.ex(c, i), rule(ci)) else { return (ci, slot, None) };
                if text.get(range.clone()) != Some(before) {
                    return (ci, slot, None);
                }
                let fresh = if c.template.has_fresh() { c.template.validate_full(ex).map(|(_, f)| f) } else { None };
                let value = fresh.as_ref().and_then(|f| f.iter().flatten().next()).map(String::as_str);
                let after = ex.after.tokens(0);
                let example = TrainingExample { file: text, tree, range, after: &after, value };
                let r = if engine_check { check::reproduces(&rule, &example) } else { Ok(()) };
                (ci, slot, Some(r))
            })
            .collect()
    }

    /// Missed edits: edits of the same bucket in a rule's training file
    /// pairs that the rule does not cover.
    fn count_missed(&self, safe: &mut [RuleCandidate]) {
        let mut by_file_bucket: HashMap<(usize, &str, &str, u64), u64> = HashMap::new();
        for (i, it) in self.items.iter().enumerate() {
            let e = self.edit(i);
            let key = (it.corpus, e.before_blob.as_str(), e.after_blob.as_str(), self.bucket_of[i]);
            *by_file_bucket.entry(key).or_default() += 1;
        }
        for c in safe {
            let mut files: BTreeMap<(usize, &str, &str), u64> = BTreeMap::new();
            for &i in &c.items {
                let e = self.edit(i);
                *files.entry((self.items[i].corpus, e.before_blob.as_str(), e.after_blob.as_str())).or_default() += 1;
            }
            c.safety.missed_edits = files
                .iter()
                .map(|(&(co, b, a), &n)| {
                    by_file_bucket.get(&(co, b, a, c.bucket)).copied().unwrap_or(0).saturating_sub(n)
                })
                .sum();
        }
    }
}

/// Whether an example's after side is its before side with keyword
/// arguments added (and the commas between them), nothing else changed.
fn only_adds_keywords(ex: &Ex<'_>) -> bool {
    let values = antiunify::added_kw_values(ex);
    if values.is_empty() {
        return false;
    }
    let kws: Vec<u32> = values.iter().map(|&v| ex.after.nodes[v as usize].parent).collect();
    let kept: Vec<&str> = (0..ex.after.nodes.len() as u32)
        .filter(|&i| ex.after.nodes[i as usize].nkids == 0)
        .filter(|&i| !kws.iter().any(|&k| k != super::tree::NONE && ex.after.contains(k, i)))
        .map(|i| ex.after.text(i))
        .filter(|t| *t != ",")
        .collect();
    let before: Vec<&str> = ex.before.tokens(0).into_iter().filter(|t| *t != ",").collect();
    kept == before
}
