//! Casts that do nothing: `.to(T)` on a value that is of type `T` already,
//! judged from the kernel's own dtypes (`tl.zeros(..., dtype=tl.float32)`,
//! an earlier `.to(T)`, `tl.arange`, `tl.program_id`, a parameter annotated
//! with a dtype, a `tl.load` through a pointer whose tensor the module's
//! docstrings give one dtype (`state: [N, K] float32 state`, passed to the
//! kernel by that name or as `param=state` at its launch), and names every
//! assignment of which agrees). A rewrite whose only change is adding or
//! dropping such casts changes nothing.

use std::collections::HashMap;

use kidiom_syntax::{Lang, parse_tree, preorder};
use tree_sitter::Node;

/// Triton's scalar types, by the name after `tl.`.
const DTYPES: &[&str] = &[
    "int1",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float8e4nv",
    "float8e5",
    "float16",
    "bfloat16",
    "float32",
    "float64",
];

/// When every difference between `base` and `result` is a cast to the type
/// its value already has: the casts, described (`.to(tl.float32)` on a
/// float32 value); `None` when the rewrite changes anything else, when a
/// dtype is not known, or for languages other than Python.
pub fn nil_casts(lang: Lang, base: &str, result: &str) -> Option<String> {
    if lang != Lang::Python || base == result {
        return None;
    }
    let (old, old_casts) = erased(base)?;
    let (new, new_casts) = erased(result)?;
    if old != new {
        return None;
    }
    let mut types: Vec<String> = old_casts.into_iter().chain(new_casts).collect();
    types.sort();
    types.dedup();
    let list = types.iter().map(|t| format!("`.to(tl.{t})` on a {t} value")).collect::<Vec<_>>().join(", ");
    Some(format!("its only change is a cast to the type the value already has ({list})"))
}

/// `text` with every nil cast cut out, and the types of the casts cut.
fn erased(text: &str) -> Option<(String, Vec<String>)> {
    let tree = parse_tree(Lang::Python, text).ok().flatten()?;
    let mut cuts: Vec<(usize, usize, String)> = Vec::new();
    let pointers = pointer_dtypes(tree.root_node(), text);
    preorder(tree.root_node(), |n| {
        if n.kind() == "function_definition" {
            let env = Env::of(n, text, &pointers);
            preorder(n, |c| {
                if let Some((recv, ty)) = cast(c, text)
                    && env.dtype(recv, text).as_deref() == Some(ty)
                {
                    cuts.push((recv.end_byte(), c.end_byte(), ty.to_string()));
                }
                true
            });
            return false;
        }
        true
    });
    cuts.sort();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, _) in &cuts {
        if *start >= at {
            out.push_str(text.get(at..*start)?);
        }
        at = at.max(*end);
    }
    out.push_str(text.get(at..)?);
    Some((out, cuts.into_iter().map(|c| c.2).collect()))
}

/// `R.to(T)` (no `bitcast=`, `fp_downcast_rounding=` or other argument):
/// its receiver and `T`'s name.
fn cast<'t>(n: Node<'t>, text: &'t str) -> Option<(Node<'t>, &'t str)> {
    if n.kind() != "call" {
        return None;
    }
    let f = n.child_by_field_name("function").filter(|f| f.kind() == "attribute")?;
    if f.child_by_field_name("attribute")?.utf8_text(text.as_bytes()).ok()? != "to" {
        return None;
    }
    let args = n.child_by_field_name("arguments")?;
    if args.named_child_count() != 1 {
        return None;
    }
    Some((f.child_by_field_name("object")?, dtype_name(args.named_child(0)?, text)?))
}

/// `tl.float32` (any module spelling) as `float32`.
fn dtype_name<'t>(n: Node, text: &'t str) -> Option<&'t str> {
    let t = n.utf8_text(text.as_bytes()).ok()?;
    let last = t.rsplit('.').next()?;
    (t.contains('.') && DTYPES.contains(&last)).then_some(last)
}

/// The one dtype word of a docstring line (`float32`, `fp32`, ...), if it names exactly one.
fn doc_dtype(line: &str) -> Option<&'static str> {
    const WORDS: &[(&str, &str)] = &[
        ("float32", "float32"),
        ("fp32", "float32"),
        ("float16", "float16"),
        ("fp16", "float16"),
        ("bfloat16", "bfloat16"),
        ("bf16", "bfloat16"),
        ("int32", "int32"),
        ("int64", "int64"),
    ];
    let mut found: Vec<&str> = line
        .split(|c: char| !c.is_alphanumeric())
        .filter_map(|w| WORDS.iter().find(|(k, _)| *k == w).map(|(_, v)| *v))
        .collect();
    found.dedup();
    (found.len() == 1).then(|| found[0])
}

/// Kernel parameters that point at tensors of a known dtype: the names a
/// docstring line gives one dtype (`initial_state: ... float32 state`),
/// under their own name and under the kernel parameter a launch passes
/// them to (`h0=initial_state`); a parameter given two dtypes has none.
fn pointer_dtypes(root: Node, text: &str) -> HashMap<String, String> {
    let mut doc: HashMap<String, Option<String>> = HashMap::new();
    let note = |map: &mut HashMap<String, Option<String>>, name: &str, ty: &str| {
        let slot = map.entry(name.to_string()).or_insert_with(|| Some(ty.to_string()));
        if slot.as_deref() != Some(ty) {
            *slot = None;
        }
    };
    let mut launches: Vec<(String, String)> = Vec::new();
    preorder(root, |n| {
        match n.kind() {
            "string" => {
                for line in n.utf8_text(text.as_bytes()).unwrap_or("").lines() {
                    let Some((names, rest)) = line.split_once(':') else { continue };
                    let names: Vec<&str> = names.split(',').map(str::trim).collect();
                    let is_names =
                        names.iter().all(|w| !w.is_empty() && w.chars().all(|c| c.is_alphanumeric() || c == '_'));
                    if let (true, Some(ty)) = (is_names, doc_dtype(rest)) {
                        names.iter().for_each(|w| note(&mut doc, w, ty));
                    }
                }
            }
            // `kernel[grid](p=x, ...)`
            "call" if n.child_by_field_name("function").is_some_and(|f| f.kind() == "subscript") => {
                if let Some(args) = n.child_by_field_name("arguments") {
                    let mut cur = args.walk();
                    for a in args.named_children(&mut cur).filter(|a| a.kind() == "keyword_argument") {
                        let part = |f: &str| a.child_by_field_name(f).and_then(|c| c.utf8_text(text.as_bytes()).ok());
                        if let (Some(p), Some(v)) = (part("name"), part("value")) {
                            launches.push((p.to_string(), v.to_string()));
                        }
                    }
                }
            }
            _ => {}
        }
        true
    });
    let mut out: HashMap<String, Option<String>> =
        doc.iter().filter_map(|(k, v)| Some((k.clone(), Some(v.clone()?)))).collect();
    for (param, arg) in &launches {
        if let Some(Some(ty)) = doc.get(arg) {
            note(&mut out, param, ty);
        }
    }
    out.into_iter().filter_map(|(k, v)| Some((k, format!("*{}", v?)))).collect()
}

/// The known dtypes of a function's names (`*T` for a pointer to `T`).
struct Env(HashMap<String, String>);

impl Env {
    /// Names whose every assignment in `f` has one known dtype (a few
    /// rounds, so that `b = a` learns `a`'s type), and parameters
    /// annotated with a dtype.
    fn of(f: Node, text: &str, pointers: &HashMap<String, String>) -> Env {
        let mut env = Env(HashMap::new());
        if let Some(params) = f.child_by_field_name("parameters") {
            let mut cur = params.walk();
            for p in params.named_children(&mut cur).filter(|p| p.kind() == "identifier") {
                let name = p.utf8_text(text.as_bytes()).unwrap_or("");
                if let Some(ty) = pointers.get(name) {
                    env.0.insert(name.to_string(), ty.clone());
                }
            }
        }
        let mut assigns: Vec<(String, Node)> = Vec::new();
        preorder(f, |n| {
            match n.kind() {
                "typed_parameter" => {
                    let name = n.named_child(0).and_then(|c| c.utf8_text(text.as_bytes()).ok());
                    let ty = n.child_by_field_name("type").and_then(|t| dtype_name(t, text));
                    if let (Some(name), Some(ty)) = (name, ty) {
                        env.0.insert(name.to_string(), ty.to_string());
                    }
                }
                "assignment" | "augmented_assignment" => {
                    let left = n.child_by_field_name("left");
                    let name =
                        left.filter(|l| l.kind() == "identifier").and_then(|l| l.utf8_text(text.as_bytes()).ok());
                    if let (Some(name), Some(right)) = (name, n.child_by_field_name("right")) {
                        assigns.push((name.to_string(), right));
                    }
                }
                _ => {}
            }
            true
        });
        for _ in 0..4 {
            let mut next: HashMap<String, Option<String>> = HashMap::new();
            for (name, right) in &assigns {
                let ty = env.dtype(*right, text);
                let slot = next.entry(name.clone()).or_insert_with(|| ty.clone());
                if *slot != ty {
                    *slot = None;
                }
            }
            let learned: HashMap<String, String> = next.into_iter().filter_map(|(k, v)| Some((k, v?))).collect();
            if learned.iter().all(|(k, v)| env.0.get(k) == Some(v)) {
                break;
            }
            env.0.extend(learned);
        }
        env
    }

    /// The dtype of an expression, where the function's own code says it.
    fn dtype(&self, n: Node, text: &str) -> Option<String> {
        let src = |n: Node| n.utf8_text(text.as_bytes()).ok().map(str::to_string);
        match n.kind() {
            "identifier" => self.0.get(&src(n)?).cloned(),
            "parenthesized_expression" => self.dtype(n.named_child(0)?, text),
            "subscript" => self.dtype(n.child_by_field_name("value")?, text),
            "binary_operator" => {
                let (l, r) = (n.child_by_field_name("left")?, n.child_by_field_name("right")?);
                let op = n.child_by_field_name("operator").and_then(|o| o.utf8_text(text.as_bytes()).ok());
                match (self.dtype(l, text), self.dtype(r, text)) {
                    // pointer arithmetic keeps the pointer's element type
                    (Some(p), _) | (_, Some(p)) if p.starts_with('*') && matches!(op, Some("+" | "-")) => Some(p),
                    (Some(a), Some(b)) => (a == b).then_some(a),
                    // a Python scalar takes the tensor's type (an int always; a float a float's)
                    (Some(a), None) | (None, Some(a)) => {
                        let lit = if self.dtype(l, text).is_some() { r } else { l };
                        (lit.kind() == "integer" || (lit.kind() == "float" && a.starts_with("float"))).then_some(a)
                    }
                    (None, None) => None,
                }
            }
            "call" => {
                if let Some((_, ty)) = cast(n, text) {
                    return Some(ty.to_string());
                }
                let f = n.child_by_field_name("function").filter(|f| f.kind() == "attribute")?;
                let name = src(f.child_by_field_name("attribute")?)?;
                let args = n.child_by_field_name("arguments")?;
                match name.as_str() {
                    "arange" | "program_id" | "num_programs" => Some("int32".into()),
                    // a load gives the element type of its pointer
                    "load" => self.dtype(args.named_child(0)?, text)?.strip_prefix('*').map(str::to_string),
                    "zeros" | "full" => {
                        let mut cur = args.walk();
                        let kw = args.named_children(&mut cur).find(|a| {
                            a.kind() == "keyword_argument"
                                && a.child_by_field_name("name").and_then(src).as_deref() == Some("dtype")
                        });
                        let positional = args.named_child(if name == "zeros" { 1 } else { 2 });
                        let ty = kw.and_then(|k| k.child_by_field_name("value")).or(positional)?;
                        dtype_name(ty, text).map(str::to_string)
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::nil_casts;
    use kidiom_syntax::Lang;

    const KERNEL: &str = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x, y, n: tl.int64):\n    acc = tl.zeros([16], dtype=tl.float32)\n    acc += tl.load(x).to(tl.float32)\n    b = acc * 2\n    o = tl.arange(0, 16)\n    w = tl.load(y)\n    tl.store(x, (b + acc).to(tl.float32))\n    tl.store(y, w.to(tl.float32))\n    tl.store(y, o + n)\n";

    fn check(from: &str, to: &str) -> Option<String> {
        assert!(KERNEL.contains(from), "{from}");
        nil_casts(Lang::Python, KERNEL, &KERNEL.replacen(from, to, 1))
    }

    #[test]
    fn dropping_or_adding_a_cast_to_the_type_the_value_has_is_nil() {
        let why = check("(b + acc).to(tl.float32)", "(b + acc)").unwrap();
        assert!(why.contains("float32"), "{why}");
        assert!(check("tl.arange(0, 16)", "tl.arange(0, 16).to(tl.int32)").is_some(), "arange is int32");
        assert!(check("o + n", "o.to(tl.int32) + n").is_some());
        assert!(check("o + n", "o + n.to(tl.int64)").is_some(), "an annotated parameter");
    }

    #[test]
    fn a_load_through_a_pointer_the_docstrings_give_a_dtype_is_of_that_dtype() {
        let src = "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(h0, x, n):\n    p = h0 + n\n    a = tl.load(p).to(tl.float32)\n    b = tl.load(x + n).to(tl.float32)\n    tl.store(x, a + b)\n\n\ndef launch(state, x):\n    \"\"\"Args:\n        state: `[N]` float32 state.\n        x:     `[N]` input (float32 or bfloat16).\n    \"\"\"\n    k[(1,)](h0=state, x=x, n=1)\n";
        let drop = |from: &str, to: &str| nil_casts(Lang::Python, src, &src.replacen(from, to, 1));
        assert!(drop("tl.load(p).to(tl.float32)", "tl.load(p)").is_some(), "h0 is the float32 state");
        assert!(drop("tl.load(x + n).to(tl.float32)", "tl.load(x + n)").is_none(), "x is one of two dtypes");
    }

    #[test]
    fn casts_of_unknown_or_other_types_and_other_changes_are_not() {
        assert!(check("tl.load(x).to(tl.float32)", "tl.load(x)").is_none(), "a load's type is not known");
        assert!(check("w.to(tl.float32)", "w").is_none());
        assert!(check("tl.arange(0, 16)", "tl.arange(0, 16).to(tl.int64)").is_none(), "a widening");
        assert!(check("(b + acc).to(tl.float32)", "(b + acc).to(tl.float16)").is_none(), "a narrowing");
        assert!(check("(b + acc).to(tl.float32)", "(b - acc)").is_none(), "another change beside it");
        assert!(check("b = acc * 2", "b = acc * 2.5").is_none());
        assert!(nil_casts(Lang::Cuda, "a", "b").is_none());
    }
}
