//! The index of one parsed text that every pattern of a catalog matches
//! against: nodes by kind, inside kernels and outside errors, and the file's
//! spellings of Triton's language module; memoized for the last tree.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::rc::Rc;

use kidiom_syntax::{KernelKind, kernel_ranges};
use tree_sitter::{Node, Tree};

/// The nodes of one parsed text that a pattern may match at: inside a
/// kernel and outside error subtrees, grouped by kind, in pre-order.
pub(crate) struct SiteIndex {
    key: TreeKey,
    /// Node kind id -> (start, end) of each node, in pre-order.
    pub(crate) by_kind: HashMap<u16, Vec<(usize, usize)>>,
    /// How the file spells Triton's language module other than `tl`
    /// (`T` after `import triton.language as T`, `triton.language`).
    pub(crate) tl_names: Rc<Vec<String>>,
}

/// The spellings of `triton.language` a Python file's imports give it,
/// other than `tl` itself; `tl.math` and `<name>.math` are spellings of it
/// too for the functions `triton.language.math` re-exports.
pub(crate) fn tl_spellings(src: &str, root: Node) -> Vec<String> {
    let mut out: Vec<String> = vec!["tl.math".into()];
    let mut c = root.walk();
    for stmt in root.named_children(&mut c) {
        let t = |n: Node| src.get(n.byte_range()).unwrap_or("").split_whitespace().collect::<String>();
        match stmt.kind() {
            "import_statement" => {
                let mut cc = stmt.walk();
                for name in stmt.children_by_field_name("name", &mut cc) {
                    match name.kind() {
                        "aliased_import" => {
                            if let (Some(n), Some(a)) =
                                (name.child_by_field_name("name"), name.child_by_field_name("alias"))
                                && t(n) == "triton.language"
                            {
                                out.push(t(a));
                            }
                        }
                        _ if t(name) == "triton" || t(name) == "triton.language" => out.push("triton.language".into()),
                        _ => {}
                    }
                }
            }
            "import_from_statement" => {
                let Some(module) = stmt.child_by_field_name("module_name") else { continue };
                if t(module) != "triton" {
                    continue;
                }
                let mut cc = stmt.walk();
                for name in stmt.children_by_field_name("name", &mut cc) {
                    if name.kind() == "aliased_import"
                        && let (Some(n), Some(a)) =
                            (name.child_by_field_name("name"), name.child_by_field_name("alias"))
                        && t(n) == "language"
                    {
                        out.push(t(a));
                    } else if t(name) == "language" {
                        out.push("language".into());
                    }
                }
            }
            _ => {}
        }
    }
    let extra: Vec<String> =
        out.iter().filter(|n| *n != "tl" && *n != "tl.math").map(|n| format!("{n}.math")).collect();
    out.extend(extra);
    out.retain(|n| n != "tl");
    out.sort();
    out.dedup();
    out
}

thread_local! {
    /// The index of the last tree asked about: applying a catalog to one file
    /// asks once per pattern, and walking the whole tree per pattern (and
    /// finding its kernels again) was most of the time.
    static LAST_INDEX: RefCell<Option<Rc<SiteIndex>>> = const { RefCell::new(None) };
}

/// Identifies a (language, text, tree) triple cheaply: the tree's root and
/// its size, the text's address and length, and a hash of the text's ends.
type TreeKey = (kidiom_syntax::Lang, usize, usize, usize, usize, u64);

fn tree_key(lang: kidiom_syntax::Lang, src: &str, tree: &Tree) -> TreeKey {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let b = src.as_bytes();
    b[..b.len().min(256)].hash(&mut h);
    b[b.len().saturating_sub(256)..].hash(&mut h);
    let root = tree.root_node();
    (lang, root.id(), root.descendant_count(), src.as_ptr() as usize, src.len(), h.finish())
}

pub(crate) fn site_index(lang: kidiom_syntax::Lang, src: &str, tree: &Tree) -> Rc<SiteIndex> {
    let key = tree_key(lang, src, tree);
    if let Some(ix) = LAST_INDEX.with(|c| c.borrow().as_ref().filter(|ix| ix.key == key).cloned()) {
        return ix;
    }
    let kernels: Vec<Range<usize>> =
        kernel_ranges(lang, src, tree).into_iter().filter(|k| k.kind != KernelKind::Binding).map(|k| k.range).collect();
    let mut by_kind: HashMap<u16, Vec<(usize, usize)>> = HashMap::new();
    let root = tree.root_node();
    kidiom_syntax::preorder(root, |node| {
        let (start, end) = (node.start_byte(), node.end_byte());
        let inside = kernels.iter().any(|k| k.start <= start && end <= k.end);
        if inside && !node.is_error() && !node.is_missing() {
            by_kind.entry(node.kind_id()).or_default().push((start, end));
        }
        // Error subtrees are not matched into; subtrees with no kernel are skipped.
        let overlaps = kernels.iter().any(|k| k.start < end && start < k.end);
        (overlaps || node == root) && !node.is_error()
    });
    let tl_names =
        Rc::new(if lang == kidiom_syntax::Lang::Python { tl_spellings(src, tree.root_node()) } else { Vec::new() });
    let ix = Rc::new(SiteIndex { key, by_kind, tl_names });
    LAST_INDEX.with(|c| *c.borrow_mut() = Some(ix.clone()));
    ix
}
