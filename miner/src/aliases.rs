//! Calls through a corpus's own names for Triton functions: a kernel that
//! calls `exp2(x)` after `from .op import exp2`, where `op.py` binds
//! `exp2 = tl.math.exp2` (in any branch), calls `tl.exp2`. Extraction sees
//! one file; this pass, over a corpus's facts before aggregation, moves such
//! calls' counts (and their examples and hint scopes) to the canonical name,
//! so function choices (`exp2` over `exp`) and hint wrappers count them.
//! Only modules of the same corpus are followed.

use std::collections::BTreeMap;

use crate::facts::{FileFacts, call_scope};
use crate::python::{PASSTHROUGH, VARYING};
use crate::values::{find_module, module_name};

/// One name a file calls that is a corpus's alias of a Triton function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallAlias {
    /// The calling file.
    pub path: String,
    /// The name it calls (`exp2`).
    pub name: String,
    /// The Triton function it is (`tl.exp2`).
    pub function: String,
    /// Calls moved.
    pub calls: u32,
}

/// Resolves the calls of one corpus's files (path, facts) through the
/// corpus's own modules; returns what it resolved.
pub fn resolve_call_aliases(files: &mut [(&str, &mut FileFacts)]) -> Vec<CallAlias> {
    let mut index: BTreeMap<String, (&str, BTreeMap<String, String>)> = BTreeMap::new();
    for (path, facts) in files.iter() {
        if facts.functions.is_empty() {
            continue;
        }
        let Some(name) = module_name(path) else { continue };
        match index.get(&name) {
            Some((p, _)) if p.len() <= path.len() => {}
            _ => {
                index.insert(name, (path, facts.functions.clone()));
            }
        }
    }
    let mut found = Vec::new();
    if index.is_empty() {
        return found;
    }
    for (path, facts) in files.iter_mut() {
        let renames: Vec<(String, String)> = facts
            .imported_calls
            .iter()
            .filter_map(|(local, (module, there))| {
                let (_, functions) = find_module(&index, path, module)?;
                Some((local.clone(), functions.get(there)?.clone()))
            })
            .collect();
        for (local, canon) in renames {
            let calls = facts.scopes.remove(&call_scope(&local)).unwrap_or(0);
            *facts.scopes.entry(call_scope(&canon)).or_default() += calls;
            for prefix in [PASSTHROUGH, VARYING] {
                if let Some(n) = facts.scopes.remove(&format!("{prefix}{local}")) {
                    *facts.scopes.entry(format!("{prefix}{canon}")).or_default() += n;
                }
            }
            if let Some(ex) = facts.call_examples.remove(&local) {
                facts.call_examples.entry(canon.clone()).or_insert(ex);
            }
            found.push(CallAlias { path: path.to_string(), name: local, function: canon, calls });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use kidiom_syntax::Lang;

    fn facts(src: &str) -> FileFacts {
        let tree = kidiom_syntax::parse_tree(Lang::Python, src).unwrap().unwrap();
        crate::python::extract(src, &tree).finish()
    }

    const OP: &str = "import os\nimport triton.language as tl\nimport triton.language.extra.libdevice as tldevice\n\nif os.environ.get('FAST') == '1':\n    exp2 = tldevice.exp2\nelse:\n    exp2 = tl.math.exp2\nhint = tl.multiple_of\nsafe = some.module.fn\n";
    const KERNEL: &str = "import triton\nimport triton.language as tl\nfrom .op import exp2, hint, safe\n\n\n@triton.jit\ndef k(x, o, B: tl.constexpr):\n    a = exp2(tl.load(x + tl.arange(0, B)))\n    b = exp2(a) + tl.math.exp2(a) + tl.exp2(a)\n    c = safe(a)\n    tl.store(o + hint(tl.arange(0, B), 16), b + c)\n";

    #[test]
    fn calls_through_a_corpus_helper_count_as_the_triton_function() {
        let (mut op, mut k) = (facts(OP), facts(KERNEL));
        assert_eq!(op.functions.get("exp2").map(String::as_str), Some("tl.exp2"), "the plain-Triton branch");
        assert_eq!(op.functions.get("hint").map(String::as_str), Some("tl.multiple_of"));
        assert!(!op.functions.contains_key("safe"), "not a Triton function");
        // tl.math.exp2 is tl.exp2 already in the kernel's own file
        assert_eq!(k.scopes.get("call:tl.exp2"), Some(&2));
        assert_eq!(k.scopes.get("call:exp2"), Some(&2));
        let mut files = vec![("pkg/op.py", &mut op), ("pkg/kern.py", &mut k)];
        let found = resolve_call_aliases(&mut files);
        assert_eq!(k.scopes.get("call:tl.exp2"), Some(&4), "{:?}", k.scopes);
        assert_eq!(k.scopes.get("call:exp2"), None);
        assert_eq!(k.scopes.get("call:tl.multiple_of"), Some(&1));
        assert!(k.scopes.contains_key("call:safe"));
        let names: Vec<(&str, &str, u32)> =
            found.iter().map(|a| (a.name.as_str(), a.function.as_str(), a.calls)).collect();
        assert_eq!(names, vec![("exp2", "tl.exp2", 2), ("hint", "tl.multiple_of", 1)]);
    }

    #[test]
    fn another_corpus_or_an_unknown_module_is_not_followed() {
        let mut k = facts(KERNEL);
        let before = k.scopes.clone();
        let mut op = facts(OP);
        // the helper module sits in an unrelated package: `.op` from pkg/ does not reach it
        let mut files = vec![("other/op.py", &mut op), ("pkg/kern.py", &mut k)];
        assert!(resolve_call_aliases(&mut files).is_empty());
        assert_eq!(k.scopes, before);
    }
}
