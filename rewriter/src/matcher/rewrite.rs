//! From a spec's `before`/`after` pair to edits at each site.
//!
//! The two templates are aligned leaf by leaf (longest common
//! subsequence). Leaves of `after` missing from `before` are inserted next
//! to the target bytes of their aligned neighbour; leaves of `before`
//! missing from `after` are deleted. Everything else — whitespace,
//! comments, trailing commas, line breaks — stays byte for byte as the
//! target has it. A captured expression that becomes an operand of an
//! inserted operator is parenthesized unless it is atomic.

use std::ops::Range;

use kidiom_syntax::Lang;
use tree_sitter::{Node, Tree};

use super::binding::{Bindings, RELEASE, Refusal};
use super::splice::{Edit, SiteEdits};
use super::template::{BOUND_FUNCTION, DEF_CALL, Hole, Shape, render};
use super::{Match, MatchError, Scope, Template, for_each_site, word_offset};
use crate::spec::RewriteSpec;

#[derive(Debug, Clone)]
enum Op {
    Keep(usize, usize),
    Del(usize),
    Ins(usize),
}

#[derive(Debug, Clone)]
enum Mode {
    /// Leaf-aligned rewrite between two tree templates.
    Tree { after: Box<Template>, ops: Vec<Op> },
    /// `after` is a new line followed by `before` (`#pragma unroll`).
    LinePrefix { line: String },
    /// `after` is a token followed by `before` (`__forceinline__`).
    TokenPrefix { token: String },
    /// `after` adds a statement at the start of the body of each function a
    /// binding module binds (`py::gil_scoped_release release;`).
    BodyPrologue { stmt: String },
    /// `after` adds a last argument to a binding module's `.def` calls
    /// (`py::call_guard<py::gil_scoped_release>()`).
    DefArg { arg: String },
    /// Values recomputed by a later loop kept from an earlier one (no template: `crate::reuse`).
    Reuse(crate::ReuseForm),
}

/// The insertion of `stmt` before the first statement of the body at
/// `body` (`{ ... }`): on a line of its own with that statement's
/// indentation, or inline for a one-line body.
fn prologue_edit(src: &str, root: Node, body: Range<usize>, stmt: &str) -> Option<Edit> {
    let mut n = root.descendant_for_byte_range(body.start, body.end)?;
    while n.byte_range() != body || n.kind() != "compound_statement" {
        n = n.parent()?;
    }
    let first = n.named_child(0)?;
    let start = first.start_byte();
    let line_start = src[..start].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let indent = &src[line_start..start];
    let text = if line_start > body.start && indent.chars().all(|c| c == ' ' || c == '\t') {
        format!("{stmt}\n{indent}")
    } else {
        format!("{stmt} ")
    };
    Some(Edit { range: start..start, text })
}

/// The insertion of `, arg` after the last argument of the `.def` call at `call`.
fn def_arg_edit(root: Node, call: Range<usize>, arg: &str) -> Option<Edit> {
    let mut n = root.descendant_for_byte_range(call.start, call.end)?;
    while n.byte_range() != call || n.kind() != "call_expression" {
        n = n.parent()?;
    }
    let args = n.child_by_field_name("arguments")?;
    let mut c = args.walk();
    let last = args.named_children(&mut c).filter(|a| a.kind() != "comment").last()?;
    Some(Edit { range: last.end_byte()..last.end_byte(), text: format!(", {arg}") })
}

/// Keywords that must not be added where another one is present: Triton
/// rejects `input_precision=` together with the older `allow_tf32=`.
const CONFLICTING_KEYWORDS: &[(&str, &str)] = &[("input_precision", "allow_tf32")];

/// The mode of a binding rewrite, which inserts one piece of text: a
/// statement at the start of a bound function's body, or a last argument of
/// `.def`. `None` when `before` (`b`, whitespace squashed) is neither;
/// `Some(Err)` with the reason when `after` (`a`) is no such insertion.
fn binding_mode(cxx: bool, b: &str, a: &str) -> Option<Result<Mode, &'static str>> {
    let insertion = |prefix: &str, suffix: &str| {
        a.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(suffix))
            .map(str::trim)
            .filter(|s| !s.is_empty() && !s.contains('$'))
            .map(str::to_string)
    };
    match (cxx, b) {
        (true, DEF_CALL) => Some(
            insertion("$M.def($$$ARGS, ", ")")
                .map(|arg| Mode::DefArg { arg })
                .ok_or("`after` does not add one argument to `.def`"),
        ),
        (true, BOUND_FUNCTION) => Some(
            insertion("$R $F($$$PARAMS) { ", " $$$BODY }")
                .map(|stmt| Mode::BodyPrologue { stmt })
                .ok_or("`after` does not add one complete statement at the start of the body"),
        ),
        _ => None,
    }
}

/// The mode of a rewrite whose `after` (`a`, whitespace squashed) is a prefix
/// followed by `before` (`b`): a line or token of its own (`#pragma unroll`,
/// `__forceinline__`), so it ends in a blank (`b_k = x` is no `b` prefixed to
/// `_k = x` but a rename). `None` when it is not; `Some(Err)` with the reason
/// when such a prefix cannot be inserted.
fn prefix_mode(pattern: &RewriteSpec, a: &str, b: &str) -> Option<Result<Mode, String>> {
    let prefix = a.strip_suffix(b).filter(|p| !p.trim().is_empty() && p.ends_with(' '))?;
    let after_text = pattern.after.trim();
    let head = after_text.len().checked_sub(pattern.before.trim().len()).filter(|n| *n > 0);
    let line_break =
        head.and_then(|n| after_text.get(..n)).is_some_and(|h| h.trim_end_matches([' ', '\t']).ends_with('\n'));
    Some(if line_break {
        if pattern.language == Lang::Python {
            Err("adding a decorator needs arguments chosen by a person".into())
        } else {
            Ok(Mode::LinePrefix { line: prefix.trim().to_string() })
        }
    } else if !prefix.trim().contains(' ') {
        Ok(Mode::TokenPrefix { token: prefix.trim().to_string() })
    } else {
        Err(format!("cannot insert {prefix:?}"))
    })
}

/// Whether template text passes the keyword argument `kw` (`kw=`, `kw =`).
fn names_keyword(text: &str, kw: &str) -> bool {
    text.match_indices(kw).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && text[i + kw.len()..].trim_start().strip_prefix('=').is_some_and(|r| !r.starts_with('='))
    })
}

/// Whether a template is a kernel launch, `$KERNEL[$GRID]($$$ARGS)` (or
/// a named kernel's, `k[$GRID]($$$ARGS)`): a call of a subscript.
fn is_launch(t: &Template) -> bool {
    let Shape::Tree(p) = &t.shape else { return false };
    p.hole == Hole::No && p.kind == "call" && p.children.first().is_some_and(|f| f.kind == "subscript")
}

/// A compiled rewrite: where (`before`), what (`after`), with which value.
#[derive(Debug, Clone)]
pub struct Rewrite {
    /// The pattern id.
    pub id: String,
    before: Template,
    mode: Mode,
    /// The value for metavariables that only `after` has (`$V`).
    value: Option<String>,
    scope: Scope,
    /// The rewrite releases the GIL: each site's bound function must pass
    /// the binding analysis (nothing Python after the release point).
    releases_gil: bool,
}

impl Rewrite {
    /// Compiles `pattern`'s rewrite. `value` overrides the value for `$V`
    /// that most sites of the histogram hold and that can be written at any
    /// site (a bar that is a name counts for each literal it can hold; see
    /// [`supported_value`](crate::supported_value)).
    pub fn new(pattern: &RewriteSpec, value: Option<&str>) -> Result<Rewrite, MatchError> {
        let no = |message: String| MatchError::NoRewrite { id: pattern.id.clone(), message };
        if pattern.before.trim().is_empty() {
            let why = pattern.guidance.clone().unwrap_or_else(|| "it has no `before` pattern".into());
            return Err(no(why));
        }
        let lang = pattern.language;
        let before = Template::parse(lang, &pattern.before)?;
        if let Some(form) = pattern.transform {
            let fits = match form {
                crate::ReuseForm::Temporary | crate::ReuseForm::StateCast => lang == Lang::Python,
                crate::ReuseForm::Local | crate::ReuseForm::Shared => matches!(lang, Lang::Cpp | Lang::Cuda),
            };
            if !fits {
                let what = match form {
                    crate::ReuseForm::Temporary => "block",
                    crate::ReuseForm::StateCast => "state cast",
                    _ => "loop",
                };
                return Err(no(format!("the {lang} language has no {what} reuse analysis")));
            }
            let scope = Scope::Anywhere;
            return Ok(Rewrite {
                id: pattern.id.clone(),
                before,
                mode: Mode::Reuse(form),
                value: None,
                scope,
                releases_gil: false,
            });
        }
        let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        let (b, a) = (squash(&pattern.before), squash(&pattern.after));
        if a == b {
            return Err(no("`after` equals `before`".into()));
        }
        let cxx = matches!(lang, Lang::Cpp | Lang::Cuda);
        // Guards and call guards change when a bound function holds the GIL; the only
        // such change kidiom can prove safe per site is a release (see `binding`).
        let binding_guard = cxx && (b == BOUND_FUNCTION || a.contains("call_guard<"));
        if binding_guard && !a.contains(RELEASE) {
            return Err(no(format!(
                "kidiom proves only GIL releases safe to add to bound functions; `{}` has no safety analysis",
                pattern.after.trim()
            )));
        }
        if let Some(mode) = binding_mode(cxx, &b, &a) {
            let mode = mode.map_err(|m| no(m.into()))?;
            return Ok(Rewrite {
                id: pattern.id.clone(),
                before,
                mode,
                value: None,
                scope: Scope::Bindings,
                releases_gil: true,
            });
        }
        if a.matches(RELEASE).count() > b.matches(RELEASE).count() && b != BOUND_FUNCTION && b != DEF_CALL {
            // An edit rule that adds a release somewhere inside a body: the binding analysis
            // judges whole bound functions, so it cannot say whether this site is safe.
            return Err(no(
                "it adds a GIL release inside a function body, where kidiom cannot check that no Python object follows it; the usage idiom (first statement of a bound function) is checked per site".into(),
            ));
        }
        let mode = match prefix_mode(pattern, &a, &b) {
            Some(mode) => mode.map_err(no)?,
            None => {
                let after = Template::parse(lang, &pattern.after)?;
                if !matches!(before.shape, Shape::Tree(_)) || !matches!(after.shape, Shape::Tree(_)) {
                    return Err(no("`after` is not a rewrite of `before`".into()));
                }
                let ops = align(&before, &after);
                Mode::Tree { after: Box::new(after), ops }
            }
        };
        let (scope, releases_gil) = if binding_guard {
            (Scope::Bindings, true)
        } else if lang == Lang::Python && is_launch(&before) {
            (Scope::Launches, false)
        } else {
            (Scope::Kernels, false)
        };
        let mut rw = Rewrite { id: pattern.id.clone(), before, mode, value: None, scope, releases_gil };
        let needs_value = rw.after_only_holes();
        if !needs_value.is_empty() {
            let v = match value {
                Some(v) => Some(v.to_string()),
                None => crate::supported_value(
                    lang,
                    pattern.values.iter().map(|v| (v.value.as_str(), v.count, v.literals.as_slice())),
                )
                .map(|s| s.value),
            };
            match v {
                Some(v) => rw.value = Some(v),
                None => {
                    return Err(no(format!(
                        "no value of ${} in its histogram can be written at any site; pass --value",
                        needs_value.join(", $")
                    )));
                }
            }
        }
        Ok(rw)
    }

    /// Where sites may be (default: inside kernels).
    pub fn with_scope(mut self, scope: Scope) -> Rewrite {
        self.scope = scope;
        self
    }

    /// Where its sites may be.
    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The value written for `$V`, if the rewrite has one.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The `before` template.
    pub fn before(&self) -> &Template {
        &self.before
    }

    fn after_only_holes(&self) -> Vec<String> {
        let Mode::Tree { after, .. } = &self.mode else { return Vec::new() };
        let have = self.before.metavariables();
        after.metavariables().into_iter().filter(|n| !have.contains(n)).collect()
    }

    /// The edits at each site of `tree` (parsed from `src`) that matches
    /// `before` and lacks the idiom, in source order. Sites may nest;
    /// resolving overlaps is the caller's business.
    pub fn site_edits(&self, src: &str, tree: &Tree) -> Vec<SiteEdits> {
        if let Mode::Reuse(form) = self.mode {
            if form == crate::ReuseForm::Temporary {
                return crate::reuse_triton::site_edits(self.before.lang, src, tree);
            }
            if form == crate::ReuseForm::StateCast {
                return crate::state_cast::site_edits(self.before.lang, src, tree);
            }
            return crate::reuse::site_edits(form, self.before.lang, src, tree);
        }
        let mut out = Vec::new();
        let bindings = self.releases_gil.then(|| Bindings::new(src, tree));
        if let (Mode::BodyPrologue { stmt }, Some(b)) = (&self.mode, &bindings) {
            for site in b.release_sites().0 {
                if let Some(e) = prologue_edit(src, tree.root_node(), site.body.clone(), stmt) {
                    out.push(SiteEdits { site: site.function, edits: vec![e] });
                }
            }
            return out;
        }
        if let (Mode::DefArg { arg }, Some(b)) = (&self.mode, &bindings) {
            for def in &b.defs {
                if matches!(b.site(def), Ok(Some(_)))
                    && let Some(e) = def_arg_edit(tree.root_node(), def.call.clone(), arg)
                {
                    out.push(SiteEdits { site: def.call.clone(), edits: vec![e] });
                }
            }
            return out;
        }
        let tuned = self.autotuned_launches(src, tree);
        for_each_site(&self.before, src, tree, self.scope, |node, m| {
            if self.present(src, node, &m) || tuned.contains(&m.range) {
                return;
            }
            if let Some(b) = &bindings {
                // a `.def` whose function may run without the GIL, and does not yet
                let Some(def) = b.defs.iter().find(|d| d.call == m.range) else { return };
                if !matches!(b.site(def), Ok(Some(_))) {
                    return;
                }
            }
            if let Some(edits) = self.edits_for(src, node, &m).filter(|e| !e.is_empty()) {
                out.push(SiteEdits { site: m.range.clone(), edits });
            }
        });
        out
    }

    /// The launches of autotuned kernels, when this rewrite adds a launch
    /// option there: the autotuner passes `num_warps=` and `num_stages=` from
    /// its configurations, and a launch that passes one too fails.
    fn autotuned_launches(&self, src: &str, tree: &Tree) -> Vec<Range<usize>> {
        let Mode::Tree { after, .. } = &self.mode else { return Vec::new() };
        let adds_option = kidiom_syntax::LAUNCH_OPTIONS
            .iter()
            .any(|o| names_keyword(&after.source, o) && !names_keyword(&self.before.source, o));
        if self.scope != Scope::Launches || !adds_option {
            return Vec::new();
        }
        kidiom_syntax::kernel_launches(src, tree).into_iter().filter(|l| l.autotuned()).map(|l| l.call).collect()
    }

    /// Whether this rewrite releases the GIL in bound functions (and so is
    /// checked per site by the binding analysis).
    pub fn releases_gil(&self) -> bool {
        self.releases_gil
    }

    /// The sites this rewrite refuses, each with its reason: for a GIL
    /// release, the bound functions that touch a Python object after the
    /// release point (or cannot be read). Empty for other rewrites.
    pub fn refusals(&self, src: &str, tree: &Tree) -> Vec<Refusal> {
        if !self.releases_gil {
            return Vec::new();
        }
        Bindings::new(src, tree).release_sites().1
    }

    /// Whether the idiom is already at (or around) this site (`m`, where
    /// `before` matched).
    fn present(&self, src: &str, node: Node, m: &Match) -> bool {
        match &self.mode {
            // A rewrite that only deletes is never done where `before`
            // matches: what it deletes is there. (`after` matches such a
            // site whenever a hole of `after` stands for what is deleted:
            // `$A += tl.dot($B, tl.trans($C))` -> `$A += tl.dot($B, $C)`.)
            Mode::Tree { ops, .. } if !ops.iter().any(|o| matches!(o, Op::Ins(_))) => false,
            Mode::Tree { after, .. } => {
                // the file's own spellings of `tl` count (`T.dot(..., input_precision=...)`)
                let mut root = node;
                while let Some(p) = root.parent() {
                    root = p;
                }
                let names = std::rc::Rc::new(if self.before.lang == Lang::Python {
                    super::tl_spellings(src, root)
                } else {
                    Vec::new()
                });
                let mut cur = Some(node);
                for _ in 0..3 {
                    let Some(n) = cur else { break };
                    if let Some(am) = super::match_with(after, src, n, names.clone())
                        && (n != node || self.same_holes(src, m, &am))
                    {
                        return true;
                    }
                    cur = n.parent();
                }
                let inserted = after.text.as_str();
                CONFLICTING_KEYWORDS.iter().any(|(add, other)| {
                    inserted.contains(&format!("{add}=")) && has_keyword(src, node, other)
                        || inserted.contains(&format!("{other}=")) && has_keyword(src, node, add)
                })
            }
            Mode::LinePrefix { line } => {
                let Some(prev) = node.prev_sibling() else { return false };
                let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
                let prev_text = squash(src.get(prev.byte_range()).unwrap_or(""));
                let want = squash(line);
                // `#pragma unroll 4` counts as `#pragma unroll`.
                let word = want.split(['(', ' ']).take(2).collect::<Vec<_>>().join(" ");
                prev_text.starts_with(&word)
            }
            Mode::TokenPrefix { token } => {
                let decl = node.child_by_field_name("declarator").map(|d| d.start_byte()).unwrap_or(node.end_byte());
                word_offset(src.get(node.start_byte()..decl).unwrap_or(""), token).is_some()
            }
            Mode::BodyPrologue { .. } | Mode::DefArg { .. } | Mode::Reuse(_) => {
                src.get(node.byte_range()).is_some_and(|t| t.contains(RELEASE))
            }
        }
    }

    /// Whether `after`'s match `am` at a site binds each single hole it
    /// shares with `before` to what `before`'s match `m` bound: `$A, $B =
    /// x` -> `$B, $A = x` matches its own sites, but has not been done there.
    fn same_holes(&self, src: &str, m: &Match, am: &Match) -> bool {
        let text = |c: &super::Capture| src.get(c.range.clone());
        self.before.leaves.iter().all(|l| match &l.hole {
            Hole::Single(name) => match (m.captures.get(name), am.captures.get(name)) {
                (Some(a), Some(b)) => text(a) == text(b),
                _ => true,
            },
            _ => true,
        })
    }

    fn edits_for(&self, src: &str, node: Node, m: &Match) -> Option<Vec<Edit>> {
        match &self.mode {
            Mode::LinePrefix { line } => {
                let start = node.start_byte();
                let line_start = src[..start].rfind('\n').map(|i| i + 1).unwrap_or(0);
                let indent = &src[line_start..start];
                if !indent.chars().all(|c| c == ' ' || c == '\t') {
                    return None; // not first on its line
                }
                let text = render(line, |_| self.value.clone()).ok()?;
                Some(vec![Edit { range: start..start, text: format!("{text}\n{indent}") }])
            }
            Mode::TokenPrefix { token } => {
                let q = m.captures.get("QUALIFIER")?;
                Some(vec![Edit { range: q.range.start..q.range.start, text: format!("{token} ") }])
            }
            Mode::Tree { after, ops } => self.tree_edits(src, m, after, ops),
            Mode::BodyPrologue { stmt } => {
                let body = node.child_by_field_name("body")?;
                prologue_edit(src, node, body.byte_range(), stmt).map(|e| vec![e])
            }
            Mode::DefArg { arg } => def_arg_edit(node, node.byte_range(), arg).map(|e| vec![e]),
            // its sites come from the analysis (`site_edits`), never from `before`'s matches
            Mode::Reuse(_) => None,
        }
    }

    fn tree_edits(&self, src: &str, m: &Match, after: &Template, ops: &[Op]) -> Option<Vec<Edit>> {
        let lookup = |name: &str| -> Option<String> {
            match m.captures.get(name) {
                Some(c) => src.get(c.range.clone()).map(str::to_string),
                None => self.value.clone(),
            }
        };
        let mut edits = Vec::new();
        // Parentheses around captures that become operands of inserted operators.
        for (k, op) in ops.iter().enumerate() {
            let Op::Keep(bi, ai) = op else { continue };
            let Hole::Single(name) = &self.before.leaves[*bi].hole else { continue };
            let Some(cap) = m.captures.get(name) else { continue };
            let next_ins = matches!(ops.get(k + 1), Some(Op::Ins(_)));
            let prev_ins = k > 0 && matches!(ops.get(k - 1), Some(Op::Ins(_)));
            let span = &after.leaves[*ai].span;
            let right = after.text[span.end..].trim_start().chars().next();
            let left = after.text[..span.start].trim_end().chars().next_back();
            let op_char = |c: Option<char>| c.is_some_and(|c| "*+-/%@&|^<>~".contains(c));
            if ((next_ins && op_char(right)) || (prev_ins && op_char(left))) && !atomic(&cap.kind) {
                edits.push(Edit { range: cap.range.start..cap.range.start, text: "(".into() });
                edits.push(Edit { range: cap.range.end..cap.range.end, text: ")".into() });
            }
        }
        let mut k = 0;
        while k < ops.len() {
            if matches!(ops[k], Op::Keep(..)) {
                k += 1;
                continue;
            }
            let run_start = k;
            while k < ops.len() && !matches!(ops[k], Op::Keep(..)) {
                k += 1;
            }
            let run = &ops[run_start..k];
            let prev = run_start.checked_sub(1).and_then(|i| match ops[i] {
                Op::Keep(b, a) => Some((b, a)),
                _ => None,
            });
            let next = ops.get(k).and_then(|o| match o {
                Op::Keep(b, a) => Some((*b, *a)),
                _ => None,
            });
            let dels: Vec<usize> =
                run.iter().filter_map(|o| if let Op::Del(b) = o { Some(*b) } else { None }).collect();
            let ins: Vec<usize> = run.iter().filter_map(|o| if let Op::Ins(a) = o { Some(*a) } else { None }).collect();
            let del_ranges: Vec<Range<usize>> =
                dels.iter().filter_map(|b| m.leaves.get(*b).cloned().flatten()).collect();
            let ins_text = if ins.is_empty() {
                String::new()
            } else if !del_ranges.is_empty() {
                let (first, last) = (ins[0], ins[ins.len() - 1]);
                after.text[after.leaves[first].span.start..after.leaves[last].span.end].to_string()
            } else {
                let from = prev.map(|(_, a)| after.leaves[a].span.end).unwrap_or(0);
                let to = next.map(|(_, a)| after.leaves[a].span.start).unwrap_or(after.text.len());
                after.text[from..to].to_string()
            };
            let mut text = render(&ins_text, lookup).ok()?;
            if !del_ranges.is_empty() {
                let start = del_ranges.iter().map(|r| r.start).min()?;
                let end = del_ranges.iter().map(|r| r.end).max()?;
                edits.push(Edit { range: start..end, text });
                continue;
            }
            if text.is_empty() {
                continue;
            }
            let pos = match (prev, next) {
                (Some((b, _)), _) => {
                    let r = m.leaves.get(b).cloned().flatten()?;
                    if r.is_empty() && text.trim_start().starts_with(',') {
                        // After an empty sequence, no separator.
                        text = text.trim_start().trim_start_matches(',').trim_start().to_string();
                    }
                    let gap = next.and_then(|(nb, _)| m.leaves.get(nb).cloned().flatten()).and_then(|n| {
                        src.get(r.end..n.start).filter(|g| !g.is_empty() && g.trim().is_empty()).map(|_| n.start)
                    });
                    match gap {
                        // The target's own blank stays (`0, BC` -> `0, min(BC`, not
                        // `0, min( BC`), unless a parenthesis opens there.
                        Some(at)
                            if text.starts_with(char::is_whitespace) && !edits.iter().any(|e| e.range.start == at) =>
                        {
                            text = text.trim_start().to_string();
                            at
                        }
                        _ => r.end,
                    }
                }
                (None, Some((b, _))) => m.leaves.get(b).cloned().flatten()?.start,
                (None, None) => return None,
            };
            edits.push(Edit { range: pos..pos, text });
        }
        Some(edits)
    }
}

fn has_keyword(src: &str, node: Node, name: &str) -> bool {
    let Some(args) = node.child_by_field_name("arguments") else { return false };
    let mut c = args.walk();
    args.named_children(&mut c).any(|a| {
        a.kind() == "keyword_argument"
            && a.child_by_field_name("name").and_then(|n| src.get(n.byte_range())) == Some(name)
    })
}

/// Node kinds that never need parentheses as an operand.
fn atomic(kind: &str) -> bool {
    matches!(
        kind,
        "identifier"
            | "attribute"
            | "call"
            | "subscript"
            | "parenthesized_expression"
            | "integer"
            | "float"
            | "string"
            | "true"
            | "false"
            | "none"
            | "list"
            | "tuple"
            | "dictionary"
            | "call_expression"
            | "field_expression"
            | "subscript_expression"
            | "number_literal"
    )
}

/// Aligns the leaves of two templates (longest common subsequence; holes
/// align by name, other leaves by text).
fn align(before: &Template, after: &Template) -> Vec<Op> {
    let key = |l: &super::template::PNode| match &l.hole {
        Hole::Single(n) => format!("$:{n}"),
        Hole::Seq(n) => format!("$$$:{n}"),
        Hole::Any => "$_".to_string(),
        Hole::No => format!("t:{}", l.text),
    };
    let b: Vec<String> = before.leaves.iter().map(key).collect();
    let a: Vec<String> = after.leaves.iter().map(key).collect();
    let (n, m) = (b.len(), a.len());
    let mut dp = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            dp[i][j] = if b[i] == a[j] { dp[i + 1][j + 1] + 1 } else { dp[i + 1][j].max(dp[i][j + 1]) };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::new();
    while i < n || j < m {
        if i < n && j < m && b[i] == a[j] {
            ops.push(Op::Keep(i, j));
            i += 1;
            j += 1;
        } else if i < n && (j == m || dp[i + 1][j] >= dp[i][j + 1]) {
            ops.push(Op::Del(i));
            i += 1;
        } else {
            ops.push(Op::Ins(j));
            j += 1;
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::apply_edits;
    use crate::spec::RewriteSpec;

    fn pattern(lang: Lang, before: &str, after: &str, values: &[&str]) -> RewriteSpec {
        RewriteSpec::usage("t", lang, before, after, values)
    }

    /// Rewrites `src` (anywhere, one round) and returns the result.
    fn check(lang: Lang, src: &str, before: &str, after: &str, values: &[&str]) -> String {
        let rw = Rewrite::new(&pattern(lang, before, after, values), None).unwrap().with_scope(Scope::Anywhere);
        let tree = kidiom_syntax::parse_tree(lang, src).unwrap().unwrap();
        let edits: Vec<Edit> = rw.site_edits(src, &tree).into_iter().flat_map(|s| s.edits).collect();
        apply_edits(src, &edits).unwrap()
    }

    const KW: (&str, &str) = ("tl.dot($$$ARGS)", "tl.dot($$$ARGS, input_precision=$V)");

    const BINDING: &str = "namespace py = pybind11;\nstatic void helper(char* d) { d[0] = 0; }\nstatic void copy(char* d, long n) {\n    // why: nothing\n    helper(d);\n}\nstatic void one(long n) { helper(nullptr); }\nstatic void appends(py::list out) {\n  out.append(1);\n}\nPYBIND11_MODULE(kv, m) {\n  m.def(\"copy\", &copy);\n  m.def(\"one\", &one);\n  m.def(\"appends\", &appends);\n}\n";

    fn binding_rewrite(after: &str) -> (Rewrite, tree_sitter::Tree) {
        let p = pattern(Lang::Cpp, if after.contains(".def") { "$M.def($$$ARGS)" } else { BOUND_FUNCTION }, after, &[]);
        (Rewrite::new(&p, None).unwrap(), kidiom_syntax::parse_tree(Lang::Cpp, BINDING).unwrap().unwrap())
    }

    #[test]
    fn gil_release_goes_first_in_bound_functions_that_touch_no_python_object() {
        let (rw, tree) = binding_rewrite("$R $F($$$PARAMS) { py::gil_scoped_release release; $$$BODY }");
        let edits: Vec<Edit> = rw.site_edits(BINDING, &tree).into_iter().flat_map(|s| s.edits).collect();
        let out = apply_edits(BINDING, &edits).unwrap();
        // a line of its own, with the first statement's indentation; inline in a one-line body;
        // never in the unbound helper, never where a py::list is used afterwards
        assert!(out.contains("long n) {\n    py::gil_scoped_release release;\n    // why"), "{out}");
        assert!(out.contains("static void one(long n) { py::gil_scoped_release release; helper(nullptr); }"), "{out}");
        assert!(out.contains("static void helper(char* d) { d[0] = 0; }"), "{out}");
        assert!(out.contains("static void appends(py::list out) {\n  out.append(1);"), "{out}");
        let refused = rw.refusals(BINDING, &tree);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].reason.contains("`out` (py::list)"), "{}", refused[0].reason);
        // applying it again changes nothing
        let again = kidiom_syntax::parse_tree(Lang::Cpp, &out).unwrap().unwrap();
        assert!(rw.site_edits(&out, &again).is_empty());
    }

    #[test]
    fn call_guard_release_only_on_safe_defs() {
        let (rw, tree) = binding_rewrite("$M.def($$$ARGS, py::call_guard<py::gil_scoped_release>())");
        let edits: Vec<Edit> = rw.site_edits(BINDING, &tree).into_iter().flat_map(|s| s.edits).collect();
        let out = apply_edits(BINDING, &edits).unwrap();
        assert!(out.contains("m.def(\"copy\", &copy, py::call_guard<py::gil_scoped_release>());"), "{out}");
        assert!(out.contains("m.def(\"appends\", &appends);"), "{out}");
        // an edit rule that adds a release mid-body cannot be checked
        let p = pattern(Lang::Cpp, "{ return $A; }", "{ py::gil_scoped_release release; return $A; }", &[]);
        assert!(Rewrite::new(&p, None).unwrap_err().to_string().contains("cannot check"));
        // other guards have no safety analysis
        let p = pattern(Lang::Cpp, BOUND_FUNCTION, "$R $F($$$PARAMS) { Timer t; $$$BODY }", &[]);
        assert!(Rewrite::new(&p, None).unwrap_err().to_string().contains("only GIL releases"));
    }

    #[test]
    fn inserts_keywords_keeping_layout() {
        let v = &["DOT_PRECISION", "\"ieee\""];
        let cases = [
            ("x = tl.dot(a, b)\n", "x = tl.dot(a, b, input_precision=\"ieee\")\n"),
            ("x = tl.dot(a, b,)\n", "x = tl.dot(a, b, input_precision=\"ieee\",)\n"),
            (
                "x = tl.dot(\n    a,  # left\n    b,  # right\n)\n",
                "x = tl.dot(\n    a,  # left\n    b, input_precision=\"ieee\",  # right\n)\n",
            ),
            ("x = tl.dot(a, b, input_precision='tf32')\n", "x = tl.dot(a, b, input_precision='tf32')\n"),
            ("x = tl.dot(a, b, allow_tf32=False)\n", "x = tl.dot(a, b, allow_tf32=False)\n"),
            (
                "x = tl.dot(a, tl.dot(b, c))\n",
                "x = tl.dot(a, tl.dot(b, c, input_precision=\"ieee\"), input_precision=\"ieee\")\n",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(check(Lang::Python, src, KW.0, KW.1, v), want, "{src}");
        }
    }

    #[test]
    fn renames_deletions_swaps_and_insertions_after_separators() {
        let py = |src: &str, b: &str, a: &str| check(Lang::Python, src, b, a, &[]);
        // `b_h` ends in `h`: a rename, not a token put before the statement.
        assert_eq!(py("h = tl.zeros([BT])\n", "h = tl.zeros([BT])", "b_h = tl.zeros([BT])"), "b_h = tl.zeros([BT])\n");
        // A rule that only deletes: `after` matches its sites too, yet they are not done.
        let (b, a) = ("$A += tl.dot($B, tl.trans($C))", "$A += tl.dot($B, $C)");
        assert_eq!(py("b_o += tl.dot(b_a, tl.trans(b_w))\n", b, a), "b_o += tl.dot(b_a, b_w)\n");
        // A swap matches its own sites, with the holes the other way round
        // (spaced as the alignment leaves it).
        let squash = |s: String| s.split_whitespace().collect::<String>();
        assert_eq!(squash(py("i, j = f()\n", "$A, $B = f()", "$B, $A = f()")), "j,i=f()");
        assert_eq!(py("i, i = f()\n", "$A, $B = f()", "$B, $A = f()"), "i, i = f()\n");
        // Inserted after an argument's separator, before the target's own blank.
        assert_eq!(py("r = range(0,  BC)\n", "range(0, BC)", "range(0, min(BC, T))"), "r = range(0,  min(BC, T))\n");
    }

    #[test]
    fn wraps_and_variants() {
        let wrap = ("tl.program_id($$$ARGS)", "tl.program_id($$$ARGS).to($V)");
        assert_eq!(
            check(
                Lang::Python,
                "i, j = tl.program_id(0), tl.program_id(1).to(tl.int64)\n",
                wrap.0,
                wrap.1,
                &["tl.int64"]
            ),
            "i, j = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)\n"
        );
        let exp = ("tl.exp($X)", "tl.exp2($X * 1.4426950408889634)");
        assert_eq!(
            check(Lang::Python, "y = tl.exp(a - b) * tl.exp(g)[:, None]\n", exp.0, exp.1, &[]),
            "y = tl.exp2((a - b) * 1.4426950408889634) * tl.exp2(g * 1.4426950408889634)[:, None]\n"
        );
        let log = ("tl.log($X)", "(tl.log2($X) * 0.6931471805599453)");
        assert_eq!(
            check(Lang::Python, "y = 2 ** tl.log(x)\n", log.0, log.1, &[]),
            "y = 2 ** (tl.log2(x) * 0.6931471805599453)\n"
        );
    }

    #[test]
    fn cuda_prefixes() {
        let src = "__global__ void k(int n) {\n    for (int i = 0; i < n; i++) {}\n    #pragma unroll\n    for (int j = 0; j < 4; j++) {}\n}\n";
        let got = check(Lang::Cuda, src, "for ($$$HEAD) $BODY", "#pragma unroll\nfor ($$$HEAD) $BODY", &[]);
        assert_eq!(got, src.replacen("    for (int i", "    #pragma unroll\n    for (int i", 1));
        let src = "__device__ float f(float x) { return x; }\n__forceinline__ __device__ float g() { return 1; }\n";
        let got = check(
            Lang::Cuda,
            src,
            "__device__ $R $F($$$PARAMS) { $$$BODY }",
            "__forceinline__ __device__ $R $F($$$PARAMS) { $$$BODY }",
            &[],
        );
        assert_eq!(got, format!("__forceinline__ {src}"));
    }

    #[test]
    fn values_must_be_usable() {
        assert!(crate::writable_value(Lang::Python, "'ieee'"));
        assert!(crate::writable_value(Lang::Python, "tl.int64"));
        assert!(!crate::writable_value(Lang::Python, "DOT_PRECISION"));
        assert!(!crate::writable_value(Lang::Python, "b_k.dtype"));
        let p = pattern(Lang::Python, KW.0, KW.1, &["DOT_PRECISION"]);
        assert!(matches!(Rewrite::new(&p, None), Err(MatchError::NoRewrite { .. })));
        assert_eq!(Rewrite::new(&p, Some("'tf32'")).unwrap().value(), Some("'tf32'"));
        // A name counts for the literals it is bound to: the value most sites hold wins.
        let mut p = pattern(Lang::Python, KW.0, KW.1, &["DOT_PRECISION", "\"ieee\""]);
        p.values[0].count = 5;
        p.values[0].literals = vec!["\"tf32\"".into()];
        assert_eq!(Rewrite::new(&p, None).unwrap().value(), Some("\"tf32\""));
        let empty = pattern(Lang::Python, "", "x", &[]);
        assert!(Rewrite::new(&empty, None).is_err());
        let broken = pattern(Lang::Python, "tl.dot(", "tl.dot()", &[]);
        assert!(matches!(Rewrite::new(&broken, None), Err(MatchError::Pattern { .. })));
    }

    #[test]
    fn a_decorator_is_a_pattern_and_a_rewrite() {
        let src = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x, T):\n    tl.store(x, tl.load(x))\n\n@triton.autotune(configs=[])\n@triton.jit\ndef j(x):\n    pass\n";
        let p = pattern(Lang::Python, "@triton.jit", "@triton.jit(do_not_specialize=$A)", &["['T']"]);
        // the value names the kernel's own parameter: no value for every site, so a person gives it
        let e = Rewrite::new(&p, None).unwrap_err();
        assert!(e.to_string().contains("pass --value"), "{e}");
        let rw = Rewrite::new(&p, Some("['T']")).unwrap();
        let tree = kidiom_syntax::parse_tree(Lang::Python, src).unwrap().unwrap();
        let sites = rw.site_edits(src, &tree);
        assert_eq!(sites.len(), 2, "both kernels' decorators, inside their kernels");
        let edits: Vec<Edit> = sites.into_iter().flat_map(|s| s.edits).collect();
        let out = apply_edits(src, &edits).unwrap();
        assert_eq!(out.matches("@triton.jit(do_not_specialize=['T'])").count(), 2, "{out}");
        assert!(out.contains("@triton.autotune(configs=[])\n@triton.jit(do_not_specialize"), "{out}");
        // where the idiom is there already, nothing to do
        let tree = kidiom_syntax::parse_tree(Lang::Python, &out).unwrap().unwrap();
        assert!(rw.site_edits(&out, &tree).is_empty());
    }
    const LAUNCHER: &str = r#"import triton
import triton.language as tl
from .ops import imported_kernel


@triton.jit
def k(x, o, N, B: tl.constexpr):
    y = h[0](x)
    tl.store(o, tl.load(x))


@triton.autotune(configs=[triton.Config({}, num_warps=4)], key=["N"])
@triton.jit
def tuned(x, B: tl.constexpr):
    pass


def launch(x, o, handlers):
    grid = (triton.cdiv(x.numel(), 64),)
    k[grid](
        x, o, x.numel(),
        B=64,
    )
    k[grid](x, o, 1, B=64, num_warps=8)
    tuned[(1,)](x, B=16)
    imported_kernel[(2,)](x)
    handlers[0](x)
    return o
"#;

    #[test]
    fn a_launch_template_rewrites_launches_of_kernels_in_host_code_only() {
        let p = pattern(Lang::Python, "$KERNEL[$GRID]($$$ARGS)", "$KERNEL[$GRID]($$$ARGS, num_warps=$V)", &["8"]);
        let rw = Rewrite::new(&p, None).unwrap();
        assert_eq!(rw.scope, Scope::Launches);
        let tree = kidiom_syntax::parse_tree(Lang::Python, LAUNCHER).unwrap().unwrap();
        let sites = rw.site_edits(LAUNCHER, &tree);
        // the first launch of `k` and the imported kernel's; not the one that has num_warps, not the
        // autotuned kernel's (its configs pass num_warps), not a subscript call that is no launch
        let at: Vec<&str> = sites.iter().map(|s| LAUNCHER[s.site.clone()].split('[').next().unwrap_or("")).collect();
        assert_eq!(at, ["k", "imported_kernel"]);
        let edits: Vec<Edit> = sites.into_iter().flat_map(|s| s.edits).collect();
        let out = apply_edits(LAUNCHER, &edits).unwrap();
        assert!(out.contains("        B=64, num_warps=8,\n    )\n"), "{out}");
        assert!(out.contains("imported_kernel[(2,)](x, num_warps=8)"), "{out}");
        assert!(out.contains("tuned[(1,)](x, B=16)\n") && out.contains("handlers[0](x)\n"), "{out}");
        // idempotent
        let tree2 = kidiom_syntax::parse_tree(Lang::Python, &out).unwrap().unwrap();
        assert!(rw.site_edits(&out, &tree2).is_empty());
        // a launch option the template already has is not an added one: autotuned launches are sites
        let q = pattern(Lang::Python, "$KERNEL[$GRID]($$$ARGS)", "$KERNEL[$GRID]($$$ARGS, DEBUG=$V)", &["True"]);
        let rq = Rewrite::new(&q, None).unwrap();
        assert!(rq.site_edits(LAUNCHER, &tree).iter().any(|s| LAUNCHER[s.site.clone()].starts_with("tuned")));
        // other templates stay inside kernels: `h[0](x)` in `k` is no launch
        let inner = pattern(Lang::Python, "h[$I]($$$ARGS)", "h[$I]($$$ARGS, flag=$V)", &["1"]);
        let ri = Rewrite::new(&inner, None).unwrap();
        assert_eq!(ri.scope, Scope::Launches);
        assert!(ri.site_edits(LAUNCHER, &tree).is_empty());
        assert_eq!(
            Rewrite::new(&pattern(Lang::Python, KW.0, KW.1, &["\"ieee\""]), None).unwrap().scope,
            Scope::Kernels
        );
    }
}
