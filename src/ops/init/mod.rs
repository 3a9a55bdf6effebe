//! `kidiom init`: a format-2 manifest and a contract skeleton written next
//! to a kernel file (docs/CONTRACTS.md), filled in from what its syntax
//! tree says: the Triton launcher's parameters (or the CUDA kernel's), which
//! of them the launcher allocates, returns or has the kernel store to, the
//! shape variables it unpacks. What cannot be read (the float64 reference,
//! sizes, the floor) is left marked `TODO`; the reference raises until it is
//! written, and the harness says so in one line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kidiom_syntax::{KernelKind, Lang, Limits, decode, kernel_launches, kernel_ranges, parse_tree, preorder};
use serde::Serialize;
use tree_sitter::Node;

mod flow;
mod strides;

/// What `kidiom init` wrote and what it leaves to the user.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    /// The kernel's name for kidiom (the file's stem).
    pub(crate) name: String,
    pub(crate) language: &'static str,
    /// The kernel function.
    pub(crate) entry: String,
    /// The Triton function that launches it.
    pub(crate) launcher: Option<String>,
    pub(crate) manifest: PathBuf,
    pub(crate) contract: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) inputs: Vec<String>,
    pub(crate) inouts: Vec<String>,
    pub(crate) outputs: Vec<String>,
    /// Shape variables, as named in the source where it names them.
    pub(crate) shape_vars: Vec<String>,
    /// What was read from the source, one line each.
    pub(crate) filled: Vec<String>,
    /// What the user must complete, one line each.
    pub(crate) todo: Vec<String>,
    /// The file's other kernels and their launchers (`kernel (launched by f)`): `--entry KERNEL`
    /// writes the contract of one of them instead.
    pub(crate) others: Vec<String>,
}

/// How a kernel argument is used, as far as the syntax tells.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    Input,
    InOut,
    Output,
}

/// One argument of the contract.
#[derive(Debug, Clone)]
struct Arg {
    name: String,
    /// `None`: a scalar.
    tensor: Option<Tensor>,
    role: Role,
    /// A scalar's Python value (source text), and whether it is a guess.
    value: Option<(String, bool)>,
    /// Allocated and returned by the launcher (not one of its parameters).
    returned: bool,
    /// Why it was classified so (for the report and the skeleton's comments).
    why: String,
}

#[derive(Debug, Clone)]
struct Tensor {
    /// Dimensions as Python expressions over the shape variables.
    dims: Vec<String>,
    /// Whether the dimensions are a guess.
    guessed: bool,
    /// Where a guess came from, when the launcher does not say (its address's strides).
    guessed_from: Option<&'static str>,
    /// The numpy dtype name: float32 unless the source says otherwise.
    dtype: &'static str,
    /// Whether the dtype is read (an annotation), not assumed.
    dtype_read: bool,
    /// Read by the kernel only as indices (its values address other tensors): random values
    /// would address out of bounds.
    index: bool,
    /// An optional index tensor the skeleton leaves out (None): valid indices are the user's.
    absent: bool,
}

impl Tensor {
    fn new(dims: Vec<String>, guessed: bool) -> Tensor {
        Tensor { dims, guessed, guessed_from: None, dtype: "float32", dtype_read: false, index: false, absent: false }
    }
}

/// What is read from a kernel file, before it is written out.
#[derive(Debug)]
struct Read {
    language: &'static str,
    entry: String,
    launcher: Option<String>,
    args: Vec<Arg>,
    shape_vars: Vec<String>,
    /// CUDA: the `__global__` parameters in order, for `launch(shape)`.
    cuda_params: Vec<CudaParam>,
    /// Tensor parameters that default to `None` (a mode the launcher turns off without them).
    optional: Vec<String>,
    /// The file's other kernels with a launcher (Triton).
    others: Vec<String>,
    /// What the launcher's `return` gives, in order: an output it allocates, or None (a value
    /// that is not one: a parameter it returns, a constant).
    return_places: Vec<Option<String>>,
    /// Outputs the kernel stores a reduction's result to (Triton): judged
    /// against the scale of the whole output, not element by element.
    reductions: Vec<String>,
    /// Shape variables the launcher passes to a `tl.constexpr` parameter
    /// (Triton): the contract check's odd sizes keep them (`[shapes] exact`).
    constexpr_sizes: Vec<String>,
    /// Mode flags that change what the launcher allocates or aliases (Triton): checked at their
    /// defaults only (the contract's FIXED).
    fixed: Vec<String>,
    filled: Vec<String>,
}

#[derive(Debug, Clone)]
enum CudaParam {
    /// A pointer or float argument, passed by its name.
    Arg(String),
    /// An integer parameter, passed as a shape variable.
    Int(String),
}

/// Writes `<stem>.toml` and `<stem>_contract.py` next to `path` (refusing
/// to replace either unless `force`).
/// `entry`: the kernel to write the contract of, where the file launches several (default: the
/// first launched by a public function); its files are then named `<stem>_<entry>`.
pub(crate) fn init(path: &Path, force: bool, entry: Option<&str>) -> Result<Report> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let lang = Lang::from_path(path).filter(|l| matches!(l, Lang::Python | Lang::Cuda)).ok_or_else(|| {
        anyhow::anyhow!("{}: kidiom init reads a Triton kernel (.py) or a CUDA kernel (.cu)", path.display())
    })?;
    let text = decode(&bytes, &Limits::default())
        .map_err(|s| anyhow::anyhow!("{}: {s}; kidiom init reads kernel source text", path.display()))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| anyhow::anyhow!("{}: no file name", path.display()))?;
    let file_name = path.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let mut read = match lang {
        Lang::Python => read_triton(text, entry),
        _ if entry.is_some() => Err("--entry chooses among a Python file's Triton kernels".to_string()),
        _ => read_cuda(text),
    }
    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let stem = match entry {
        Some(e) => format!("{stem}_{e}"),
        None => stem,
    };
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let manifest = dir.join(format!("{stem}.toml"));
    let contract_name = format!("{stem}_contract.py");
    let contract = dir.join(&contract_name);
    for p in [&manifest, &contract] {
        if p.exists() && !force {
            bail!("{} exists; kidiom init does not overwrite it (pass --force to)", p.display());
        }
    }
    let (mut manifest_text, mut todo) = manifest_text(&stem, &file_name, &contract_name, &read);
    if lang == Lang::Python
        && let Some((rel, package)) = own_project(path, text)
    {
        // FLA's kernels import `fla.ops.utils` from the package they live in: the sandboxed
        // worker gets that package from this folder (kernels/harness/project.py)
        manifest_text.push_str(&format!(
            "\n[python]\npath = [{}]   # the folder holding `{package}`, the package {file_name} lives in and \
             imports\n",
            toml_str(&rel)
        ));
        read.filled.push(format!("[python] path {rel}: the folder holding `{package}`, which {file_name} imports"));
    }
    let (contract_text, contract_todo) = contract_text(&stem, &file_name, &read);
    todo.extend(contract_todo);
    write_new(&contract, &contract_text)?;
    write_new(&manifest, &manifest_text)?;
    let names = |r: Role| read.args.iter().filter(|a| a.role == r).map(|a| a.name.clone()).collect::<Vec<_>>();
    Ok(Report {
        name: stem,
        language: read.language,
        entry: read.entry.clone(),
        launcher: read.launcher.clone(),
        manifest,
        contract,
        args: read.args.iter().filter(|a| !a.returned).map(|a| a.name.clone()).collect(),
        inputs: names(Role::Input),
        inouts: names(Role::InOut),
        outputs: names(Role::Output),
        shape_vars: read.shape_vars.clone(),
        filled: read.filled,
        todo,
        others: read.others,
    })
}

/// The package a Python kernel file lives in and imports (absolutely or relatively) (`fla/ops/kda/x.py` importing
/// `fla.ops.utils`), as the folder holding it relative to the file's folder (`../../..`) and its
/// name. None where the file imports no package it lies in.
fn own_project(path: &Path, text: &str) -> Option<(String, String)> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir = std::fs::canonicalize(dir).ok()?;
    let imported: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l.strip_prefix("from ").or_else(|| l.strip_prefix("import "))?;
            let top = rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next()?;
            (!top.is_empty()).then_some(top)
        })
        .collect();
    // the top of the packages the file lies in (each folder up with an `__init__.py`), as Python
    // names the file: `fla` for fla/modules/causal_conv1d/ops.py, not `causal_conv1d`, which that
    // file imports as another project
    let packaged = dir.ancestors().enumerate().take_while(|(_, f)| f.join("__init__.py").is_file()).last();
    // `from .utils import x`: relative to the package it lies in, which must be importable
    let relative = text.lines().any(|l| l.trim_start().starts_with("from ."));
    let named = |(up, f): (usize, &Path)| Some((up, f.file_name()?.to_str()?.to_string()));
    if let Some((up, name)) = packaged.and_then(named)
        && (relative || imported.contains(name.as_str()))
    {
        return Some((vec![".."; up + 1].join("/"), name));
    }
    // a namespace package (SGLang's `sglang/srt/...` has no `__init__.py` below its top): the
    // outermost folder the file lies in that it imports by name
    dir.ancestors()
        .take(32)
        .enumerate()
        .filter_map(named)
        .filter(|(_, name)| imported.contains(name.as_str()))
        .last()
        .map(|(up, name)| (vec![".."; up + 1].join("/"), name))
}

fn write_new(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

fn node_text<'a>(n: Node<'_>, text: &'a str) -> &'a str {
    text.get(n.byte_range()).unwrap_or("")
}

/// The identifiers an address is computed from: [`identifiers`] less those inside a load
/// (`ht + tl.load(indices + i) * stride` addresses `ht`: what is loaded from `indices` is an
/// offset, and `indices` is only read).
fn address_identifiers(n: Node<'_>, text: &str) -> Vec<String> {
    names_under(n, text, true)
}

/// Every identifier under `n`, in source order (attribute names excluded:
/// `x.shape` is `x`; `tl.` and `triton.` left out: `tl.make_block_ptr(q, ...)` is `q`, ...).
fn identifiers(n: Node<'_>, text: &str) -> Vec<String> {
    names_under(n, text, false)
}

/// [`identifiers`], or ([`address_identifiers`]) those outside loads.
fn names_under(n: Node<'_>, text: &str, skip_loads: bool) -> Vec<String> {
    let mut out = Vec::new();
    // without recursion (a chain `x.a.a.a...` is as deep as it is long): an attribute's name
    // (`x.shape` is `x`) and a keyword's (`mask=m` is `m`) are no names, noted at their parent
    let mut not_names: BTreeSet<usize> = BTreeSet::new();
    preorder(n, |c| {
        if skip_loads && c.kind() == "call" && callee_name(c, text) == "load" {
            return false;
        }
        // `tl.make_block_ptr(q, ...)` is made from q: Triton's module is no name of the kernel's
        if c.kind() == "attribute"
            && c.child_by_field_name("object")
                .is_some_and(|o| o.kind() == "identifier" && matches!(node_text(o, text), "tl" | "triton"))
        {
            return false;
        }
        match c.kind() {
            "attribute" => not_names.extend(c.child_by_field_name("attribute").map(|a| a.id())),
            "keyword_argument" => not_names.extend(c.child_by_field_name("name").map(|a| a.id())),
            "identifier" if !not_names.contains(&c.id()) => out.push(node_text(c, text).to_string()),
            _ => {}
        }
        true
    });
    out
}

/// A Python parameter: its name, annotation and default, as text.
struct Param {
    name: String,
    annotation: Option<String>,
    default: Option<String>,
    /// After a `*` or `*args`: passed by name only.
    keyword_only: bool,
}

fn python_params(def: Node<'_>, text: &str) -> Vec<Param> {
    let mut out = Vec::new();
    let Some(params) = def.child_by_field_name("parameters") else { return out };
    let mut c = params.walk();
    let mut keyword_only = false;
    for p in params.named_children(&mut c) {
        let field = |f: &str| p.child_by_field_name(f).map(|n| node_text(n, text).to_string());
        let param = match p.kind() {
            "identifier" => {
                Param { name: node_text(p, text).to_string(), annotation: None, default: None, keyword_only }
            }
            "typed_parameter" => {
                let name =
                    p.named_child(0).filter(|n| n.kind() == "identifier").map(|n| node_text(n, text).to_string());
                let Some(name) = name else {
                    // `*args: T`
                    keyword_only |= p.named_child(0).is_some_and(|n| n.kind() == "list_splat_pattern");
                    continue;
                };
                Param { name, annotation: field("type"), default: None, keyword_only }
            }
            "default_parameter" | "typed_default_parameter" => {
                let Some(name) = field("name") else { continue };
                Param { name, annotation: field("type"), default: field("value"), keyword_only }
            }
            "keyword_separator" | "list_splat_pattern" => {
                keyword_only = true;
                continue;
            }
            _ => continue,
        };
        if param.name != "self" {
            out.push(param);
        }
    }
    out
}

/// The function definition a byte range of a Triton kernel holds.
fn function_in(n: Node<'_>) -> Option<Node<'_>> {
    if n.kind() == "function_definition" {
        return Some(n);
    }
    let mut c = n.walk();
    n.named_children(&mut c).find(|k| k.kind() == "function_definition")
}

fn is_numeric_literal(s: &str) -> bool {
    let s = s.trim().trim_start_matches('-');
    !s.is_empty() && s.parse::<f64>().is_ok()
}

fn is_scalar_annotation(a: &str) -> bool {
    matches!(a.trim(), "int" | "float" | "bool")
}

/// The callee's last name (`torch.empty_like` -> `empty_like`).
fn callee_name(call: Node<'_>, text: &str) -> String {
    let f = call.child_by_field_name("function").map(|f| node_text(f, text)).unwrap_or("");
    f.rsplit('.').next().unwrap_or(f).to_string()
}

/// Calls that allocate a tensor in a launcher.
const ALLOCATORS: &[&str] = &[
    "empty",
    "empty_like",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "new_empty",
    "new_zeros",
    "new_ones",
    "new_full",
    "empty_strided",
];

fn read_triton(text: &str, want: Option<&str>) -> std::result::Result<Read, String> {
    let tree = parse_tree(Lang::Python, text).map_err(|s| s.to_string())?.ok_or("no parser for Python")?;
    let root = tree.root_node();
    let kernels: Vec<Node<'_>> = kernel_ranges(Lang::Python, text, &tree)
        .into_iter()
        .filter(|k| k.kind == KernelKind::Triton)
        .filter_map(|k| root.descendant_for_byte_range(k.range.start, k.range.end))
        .filter_map(function_in)
        .collect();
    if kernels.is_empty() {
        return Err("no @triton.jit kernel here (kidiom init reads a Triton kernel and the function that \
                    launches it, or an extern \"C\" __global__ CUDA kernel)"
            .into());
    }
    let kernel_name = |k: Node<'_>| k.child_by_field_name("name").map(|n| node_text(n, text).to_string());
    // the launches of the file's own kernels, each in a plain function (the launcher)
    let mut found: Vec<(Node<'_>, Node<'_>, Node<'_>)> = Vec::new(); // (kernel, launcher, call)
    for l in kernel_launches(text, &tree) {
        let Some(kernel) = kernels.iter().copied().find(|k| kernel_name(*k).as_deref() == Some(l.kernel.as_str()))
        else {
            continue;
        };
        let Some(mut call) = root.descendant_for_byte_range(l.call.start, l.call.end) else { continue };
        while call.kind() != "call" || call.byte_range() != l.call {
            match call.parent() {
                Some(p) => call = p,
                None => break,
            }
        }
        let mut up = call.parent();
        let mut launcher = None;
        while let Some(n) = up {
            if n.kind() == "function_definition" {
                launcher = Some(n);
            }
            up = n.parent();
        }
        if let Some(f) = launcher {
            found.push((kernel, f, call));
        }
    }
    // a public launcher first (a name without a leading underscore)
    found.sort_by_key(|(_, f, _)| kernel_name(*f).is_none_or(|n| n.starts_with('_')));
    let pair = |(k, f, _): &(Node<'_>, Node<'_>, Node<'_>)| {
        format!("{} (launched by {})", kernel_name(*k).unwrap_or_default(), kernel_name(*f).unwrap_or_default())
    };
    let chosen = match want {
        None => found.first(),
        Some(w) => Some(found.iter().find(|(k, _, _)| kernel_name(*k).as_deref() == Some(w)).ok_or_else(|| {
            let launched: Vec<String> = found.iter().map(pair).collect();
            format!(
                "no kernel {w} with a launcher here (launched: {})",
                if launched.is_empty() { "none".to_string() } else { launched.join(", ") }
            )
        })?),
    };
    let others: Vec<String> = {
        let mut seen = BTreeSet::new();
        found
            .iter()
            .filter(|p| chosen.is_none_or(|c| c.0 != p.0))
            .filter(|(k, _, _)| seen.insert(kernel_name(*k)))
            .map(pair)
            .collect()
    };
    let Some(&(kernel, launcher, call)) = chosen else {
        let names: Vec<String> = kernels.iter().filter_map(|k| kernel_name(*k)).collect();
        return Err(format!(
            "the Triton kernel {} has no launcher here (a plain def that calls {}[grid](...)); \
             kidiom init needs one to know the kernel's arguments",
            names.join(", "),
            names.first().map(String::as_str).unwrap_or("kernel")
        ));
    };
    let entry = kernel_name(kernel).unwrap_or_default();
    // an autograd Function's `forward` launches it (FLA's `FusedChunkBasedFunction`): the harness
    // calls `Function.apply`, whose arguments are forward's after `ctx`
    let function_class = autograd_function_of(launcher, text);
    let launcher_name = match &function_class {
        Some(class) => format!("{class}.apply"),
        None => kernel_name(launcher).unwrap_or_default(),
    };
    let mut filled = vec![format!("kernel {entry}, launched by {launcher_name}")];

    // the kernel: its parameters, which are constexpr, which are loaded from and stored to
    let kparams = python_params(kernel, text);
    let constexpr: BTreeSet<String> = kparams
        .iter()
        .filter(|p| p.annotation.as_deref().is_some_and(|a| a.contains("constexpr")))
        .map(|p| p.name.clone())
        .collect();
    let pnames: BTreeSet<String> = kparams.iter().map(|p| p.name.clone()).collect();
    let body = kernel.child_by_field_name("body");
    // local names bound to expressions of parameters (`row = y_ptr + pid * stride`)
    let mut alias: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // and the first name of each (the base of an address: `x_ptr` in `x_ptr + pid * stride`)
    let mut alias_first: BTreeMap<String, String> = BTreeMap::new();
    let (mut loads, mut stores) = (Vec::<Node<'_>>::new(), Vec::<Node<'_>>::new());
    // what each local name is assigned (all its right-hand sides), and each store's value: a store
    // of a reduction's result (tl.sum, tl.max, ...) writes a reduction output
    let mut assigned: BTreeMap<String, String> = BTreeMap::new();
    let mut stored_values: Vec<(Node<'_>, String)> = Vec::new();
    // each local's right-hand sides as nodes, tuple assignments element by element
    // (`bos, eos = tl.load(cu_seqlens + i_n), ...`): what an address is computed from
    let mut rhs_nodes: BTreeMap<String, Vec<Node<'_>>> = BTreeMap::new();
    if let Some(body) = body {
        preorder(body, |n| {
            match n.kind() {
                "assignment" | "augmented_assignment" => {
                    if let (Some(l), Some(r)) = (n.child_by_field_name("left"), n.child_by_field_name("right")) {
                        for (name, part) in assigned_parts(l, r, text) {
                            rhs_nodes.entry(name).or_default().push(part);
                        }
                    }
                    if let (Some(l), Some(r)) = (n.child_by_field_name("left"), n.child_by_field_name("right"))
                        && l.kind() == "identifier"
                    {
                        let ids = address_identifiers(r, text);
                        let name = node_text(l, text).to_string();
                        let rhs = assigned.entry(name.clone()).or_default();
                        rhs.push(' ');
                        rhs.push_str(node_text(r, text));
                        if let Some(first) = ids.first() {
                            alias_first.entry(name.clone()).or_insert_with(|| first.clone());
                        }
                        alias.entry(name).or_default().extend(ids);
                    }
                }
                "call" => {
                    let name = callee_name(n, text);
                    let first = n.child_by_field_name("arguments").and_then(|a| a.named_child(0));
                    if let Some(first) = first {
                        if name == "load" {
                            loads.push(first);
                        } else if name == "store" || name.starts_with("atomic_") {
                            stores.push(first);
                            if let Some(v) = store_value(n, text) {
                                stored_values.push((first, v));
                            }
                        }
                        if name.starts_with("atomic_") {
                            loads.push(first);
                        }
                    }
                }
                _ => {}
            }
            true
        });
    }
    let params_of = |exprs: &[Node<'_>]| -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut todo: Vec<String> = exprs.iter().flat_map(|e| address_identifiers(*e, text)).collect();
        let mut seen = BTreeSet::new();
        while let Some(id) = todo.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            if pnames.contains(&id) {
                out.insert(id.clone());
            }
            if let Some(from) = alias.get(&id) {
                todo.extend(from.iter().cloned());
            }
        }
        out
    };
    // where each parameter is first loaded from and stored to: loaded before it is stored,
    // a buffer is updated in place; stored first, it is an output (read back, perhaps)
    let first_at = |exprs: &[Node<'_>]| -> BTreeMap<String, usize> {
        let mut at: BTreeMap<String, usize> = BTreeMap::new();
        for e in exprs {
            for p in params_of(std::slice::from_ref(e)) {
                let pos = at.entry(p).or_insert(usize::MAX);
                *pos = (*pos).min(e.start_byte());
            }
        }
        at
    };
    let (first_load, first_store) = (first_at(&loads), first_at(&stores));
    let loaded: BTreeSet<String> = first_load
        .iter()
        .filter(|(p, at)| first_store.get(*p).is_none_or(|s| *at < s))
        .map(|(p, _)| p.clone())
        .collect();
    let stored = params_of(&stores);
    // a reduction's result is stored to fewer positions than its inputs are loaded from: its
    // address has no tl.arange where a load's has (RMSNorm stores a row derived from a tl.sum
    // through its arange: not a reduction)
    let loads_ranged = loads.iter().any(|l| mentions(node_text(*l, text), &assigned, &["tl.arange("]));
    let reduced_stores: Vec<Node<'_>> = stored_values
        .iter()
        .filter(|(a, v)| {
            loads_ranged && is_reduction(v, &assigned) && !mentions(node_text(*a, text), &assigned, &["tl.arange("])
        })
        .map(|(a, _)| *a)
        .collect();
    let reduced = params_of(&reduced_stores);
    // pointers: parameters a load or store reaches (strides and sizes are among them too:
    // a pointer is a parameter that is not constexpr and is the *base* of an address, which
    // the syntax reads as the first name of the address expression)
    let base_of = |exprs: &[Node<'_>]| -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for e in exprs {
            let mut id = identifiers(*e, text).into_iter().next();
            let mut guard = 0;
            while let Some(i) = id.clone() {
                if pnames.contains(&i) || guard > 16 {
                    break;
                }
                guard += 1;
                id = alias_first.get(&i).cloned();
            }
            if let Some(i) = id.filter(|i| pnames.contains(i) && !constexpr.contains(i)) {
                out.insert(i);
            }
        }
        out
    };
    let mut pointers = base_of(&loads);
    pointers.extend(base_of(&stores));
    let (loaded, stored): (BTreeSet<String>, BTreeSet<String>) =
        (loaded.intersection(&pointers).cloned().collect(), stored.intersection(&pointers).cloned().collect());
    // pointers read only as offsets into others (cu_seqlens, state indices), and pointers
    // addressed alike (q as k)
    let addresses: Vec<Node<'_>> = loads.iter().chain(&stores).copied().collect();
    let index_of: BTreeSet<String> = flow::index_params(&addresses, &rhs_nodes, text, &|e| params_of(e))
        .into_iter()
        .filter(|p| pointers.contains(p) && !stored.contains(p))
        .collect();
    let addressed = flow::address_shapes(&rhs_nodes, &alias_first, &pointers, text);
    // each pointer's first address in the source: a local made from it (`p_g = g + ...`) or a
    // load or store's own (`tl.load(A_log + i_hv)`); the pointer's own moves (`q = q + ...`)
    // are added to it where its layout is read
    let mut first_address: BTreeMap<String, Node<'_>> = BTreeMap::new();
    let made: Vec<Node<'_>> = rhs_nodes
        .iter()
        .filter(|(local, _)| {
            !pointers.contains(*local) && alias_first.get(*local).is_some_and(|p| pointers.contains(p))
        })
        .filter_map(|(_, rhs)| rhs.first().copied())
        .chain(addresses.iter().copied())
        .collect();
    // the first block pointer over each pointer: `tl.make_block_ptr(base, shape, strides, ...)`
    let mut block_pointers: BTreeMap<String, (Node<'_>, Vec<Node<'_>>)> = BTreeMap::new();
    if let Some(body) = body {
        preorder(body, |n| {
            if n.kind() == "call"
                && callee_name(n, text) == "make_block_ptr"
                && let Some(args) = n.child_by_field_name("arguments")
            {
                let arg = |at: usize, name: &str| {
                    let mut c = args.walk();
                    let all: Vec<Node<'_>> = args.named_children(&mut c).filter(|a| a.kind() != "comment").collect();
                    all.iter()
                        .find_map(|a| {
                            (a.kind() == "keyword_argument"
                                && a.child_by_field_name("name").is_some_and(|k| node_text(k, text) == name))
                            .then(|| a.child_by_field_name("value"))
                            .flatten()
                        })
                        .or_else(|| all.get(at).copied().filter(|a| a.kind() != "keyword_argument"))
                };
                if let (Some(base), Some(st)) = (arg(0, "base"), arg(2, "strides"))
                    && st.kind() == "tuple"
                    && let Some(p) = identifiers(base, text).into_iter().next().filter(|p| pointers.contains(p))
                {
                    let mut c = st.walk();
                    let elems: Vec<Node<'_>> = st.named_children(&mut c).collect();
                    block_pointers.entry(p).or_insert((base, elems));
                }
            }
            true
        });
    }
    for e in made {
        if let Some(p) = identifiers(e, text).into_iter().next().filter(|p| pointers.contains(p)) {
            let slot = first_address.entry(p).or_insert(e);
            if e.start_byte() < slot.start_byte() {
                *slot = e;
            }
        }
    }

    // the launch: which launcher name goes to which kernel parameter
    let mut passed: BTreeMap<String, String> = BTreeMap::new(); // kernel param -> launch argument text
    let mut passed_nodes: BTreeMap<String, Node<'_>> = BTreeMap::new();
    if let Some(args) = call.child_by_field_name("arguments") {
        let mut c = args.walk();
        let mut i = 0;
        for a in args.named_children(&mut c) {
            if a.kind() == "keyword_argument" {
                if let (Some(n), Some(v)) = (a.child_by_field_name("name"), a.child_by_field_name("value")) {
                    passed.insert(node_text(n, text).to_string(), node_text(v, text).to_string());
                    passed_nodes.insert(node_text(n, text).to_string(), v);
                }
            } else if a.kind() != "comment" {
                if let Some(p) = kparams.get(i) {
                    passed.insert(p.name.clone(), node_text(a, text).to_string());
                    passed_nodes.insert(p.name.clone(), a);
                }
                i += 1;
            }
        }
    }

    // the launcher: its parameters, allocations, shape unpacking, returns, local aliases
    let mut lparams = python_params(launcher, text);
    if function_class.is_some() && !lparams.is_empty() {
        lparams.remove(0); // ctx
    }
    // keyword-only parameters (after `*`): where each has a default, left to it; where one has
    // none, all are ARGS after the positional ones (the harness binds the arguments beyond a
    // launcher's positional parameters to its keyword-only ones, in order)
    let required_by_name = lparams.iter().any(|p| p.keyword_only && p.default.is_none());
    for p in lparams.iter().filter(|p| p.keyword_only) {
        match &p.default {
            Some(d) if !required_by_name => filled.push(format!("{}: keyword-only, left to its default `{d}`", p.name)),
            _ => filled.push(format!("{}: keyword-only, passed by name after the positional arguments", p.name)),
        }
    }
    if !required_by_name {
        lparams.retain(|p| !p.keyword_only);
    }
    let lnames: BTreeSet<String> = lparams.iter().map(|p| p.name.clone()).collect();
    let mut local_alias: BTreeMap<String, String> = BTreeMap::new(); // local -> first name it is made from
    let mut allocated: BTreeMap<String, Option<String>> = BTreeMap::new(); // local -> like whom
    let mut alloc_dims: BTreeMap<String, Vec<String>> = BTreeMap::new(); // local -> its dims
    let mut unpacked: BTreeMap<String, Vec<String>> = BTreeMap::new(); // tensor -> its dims
    let mut indexed: Vec<(String, i64, String)> = Vec::new(); // (tensor, index, var)
    // the values the launcher's (last) `return` gives, each the local it is where it is one
    let mut returned: Vec<Option<String>> = Vec::new();
    // locals that are another name's very value (`final_state = initial_state`, `o = y.view(...)`)
    let mut exact_alias: BTreeMap<String, String> = BTreeMap::new();
    // names a tensor's shape is kept under (`ctx.input_shape = logits.shape`)
    let mut shape_alias: BTreeMap<String, String> = BTreeMap::new();
    let mut attr_used: BTreeSet<String> = BTreeSet::new(); // names with .shape/.stride/... used
    // the mode flags (bool parameters with a default) and the branches their defaults take: the
    // skeleton describes the call with every flag at its default (`if inplace_final_state:
    // final_state = initial_state` makes the state in/out); a flag whose branches allocate or
    // alias a tensor is checked at its default only (FIXED)
    let flags: BTreeMap<String, bool> = lparams
        .iter()
        .filter_map(|p| match p.default.as_deref().map(str::trim) {
            Some("True") => Some((p.name.clone(), true)),
            Some("False") => Some((p.name.clone(), false)),
            _ => None,
        })
        .collect();
    let pointer_args: BTreeSet<String> = passed_nodes
        .iter()
        .filter(|(kp, n)| pointers.contains(*kp) && n.kind() == "identifier")
        .map(|(_, n)| node_text(*n, text).to_string())
        .collect();
    let is_tensor_param = |name: &str| {
        lparams.iter().any(|p| {
            p.name == name
                && (pointer_args.contains(name) || p.annotation.as_deref().is_some_and(|a| a.contains("Tensor")))
        })
    };
    let paths = match launcher.child_by_field_name("body") {
        Some(body) => flow::default_paths(body, text, &flags, &is_tensor_param),
        None => flow::Paths::default(),
    };
    // allocations in branches the defaults skip: a hint of the shape of the tensor a taken
    // branch names instead (`final_state = q.new_empty(N, HV, K, V)` where the default makes it
    // `initial_state`), from the branch fewest skipped branches hold
    let mut alloc_hints: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
    if let Some(body) = launcher.child_by_field_name("body") {
        preorder(body, |n| {
            if n.kind() == "assignment"
                && let (Some(l), Some(r)) = (n.child_by_field_name("left"), n.child_by_field_name("right"))
                && l.kind() == "identifier"
                && r.kind() == "call"
                && ALLOCATORS.contains(&callee_name(r, text).as_str())
                && let Some(dims) = allocation_dims(r, text)
            {
                let depth = paths.depth(n);
                let e = alloc_hints.entry(node_text(l, text).to_string()).or_insert((usize::MAX, Vec::new()));
                if depth < e.0 {
                    *e = (depth, dims);
                }
            }
            !matches!(n.kind(), "function_definition" | "class_definition" | "lambda")
        });
    }
    if let Some(body) = launcher.child_by_field_name("body") {
        preorder(body, |n| {
            if paths.skips(n) {
                return false;
            }
            match n.kind() {
                "function_definition" | "class_definition" | "lambda" => return false,
                "attribute" => {
                    let attr = n.child_by_field_name("attribute").map(|a| node_text(a, text)).unwrap_or("");
                    if let Some(o) = n.child_by_field_name("object").filter(|o| o.kind() == "identifier")
                        && matches!(attr, "shape" | "stride" | "dtype" | "device" | "numel" | "size" | "is_contiguous")
                    {
                        attr_used.insert(node_text(o, text).to_string());
                    }
                }
                "assignment" => {
                    let (Some(l), Some(r)) = (n.child_by_field_name("left"), n.child_by_field_name("right")) else {
                        return true;
                    };
                    let rt = node_text(r, text).trim();
                    // `ctx.input_shape = logits.shape`, unpacked later (FLA's GRPO loss)
                    if let Some(t) = rt.strip_suffix(".shape").filter(|t| is_name(t))
                        && matches!(l.kind(), "identifier" | "attribute")
                    {
                        shape_alias.insert(node_text(l, text).trim().to_string(), t.to_string());
                    }
                    // `M, N = x.shape`, and upstream's `B, T, H, K, V = *k.shape, v.shape[-1]`
                    if matches!(l.kind(), "pattern_list" | "tuple_pattern") {
                        let mut c = l.walk();
                        let names: Vec<String> =
                            l.named_children(&mut c).map(|d| node_text(d, text).to_string()).collect();
                        if names.iter().all(|d| is_name(d)) {
                            if let Some(t) = shape_alias.get(rt) {
                                unpacked.insert(t.clone(), names);
                                return true;
                            }
                            for (t, dims) in unpack_shapes(&names, r, text, &mut indexed) {
                                unpacked.insert(t, dims);
                            }
                        }
                        return true;
                    }
                    if l.kind() != "identifier" {
                        return true;
                    }
                    let lt = node_text(l, text).to_string();
                    // `N = x.shape[-1]`, `N = x.size(1)`
                    if let Some((t, i)) = shape_index(rt) {
                        indexed.push((t, i, lt));
                        return true;
                    }
                    if r.kind() == "call" && ALLOCATORS.contains(&callee_name(r, text).as_str()) {
                        let like = r
                            .child_by_field_name("arguments")
                            .and_then(|a| a.named_child(0))
                            .filter(|a| a.kind() == "identifier")
                            .map(|a| node_text(a, text).to_string())
                            .filter(|_| callee_name(r, text).ends_with("_like"));
                        // `torch.empty((M, N), ...)` or `torch.empty(M, N, ...)`: its dims, when names
                        if like.is_none()
                            && !callee_name(r, text).ends_with("_like")
                            && let Some(dims) = allocation_dims(r, text)
                        {
                            alloc_dims.insert(lt.clone(), dims);
                        }
                        allocated.insert(lt, like);
                        return true;
                    }
                    if let Some(same) = returned_tensor(r, text) {
                        exact_alias.insert(lt.clone(), same);
                    }
                    if let Some(first) = identifiers(r, text).into_iter().next() {
                        local_alias.insert(lt, first);
                    }
                }
                "return_statement" => {
                    returned.clear();
                    let mut c = n.walk();
                    for e in n.named_children(&mut c) {
                        if matches!(e.kind(), "expression_list" | "tuple") {
                            let mut c2 = e.walk();
                            returned.extend(e.named_children(&mut c2).map(|x| returned_tensor(x, text)));
                        } else {
                            returned.push(returned_tensor(e, text));
                        }
                    }
                }
                _ => {}
            }
            true
        });
    }
    // the launcher name (parameter or allocation) behind a local
    let is_launcher_name = |n: &str| lnames.contains(n) || allocated.contains_key(n);
    let resolve = |name: &str| follow(name, &local_alias, &is_launcher_name);
    // launcher name -> (loaded, stored) through the kernel parameters it is passed as
    let mut as_pointer: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    let mut as_scalar: BTreeSet<String> = BTreeSet::new();
    // launcher names the kernel stores a reduction's result to, and those passed as constexprs
    let mut reductions: BTreeSet<String> = BTreeSet::new();
    let mut as_constexpr: BTreeSet<String> = BTreeSet::new();
    for (kp, node) in &passed_nodes {
        let Some(first) = identifiers(*node, text).into_iter().next() else { continue };
        let who = resolve(&first);
        if pointers.contains(kp) {
            if reduced.contains(kp) {
                reductions.insert(who.clone());
            }
            let e = as_pointer.entry(who).or_default();
            e.0 |= loaded.contains(kp);
            e.1 |= stored.contains(kp);
        } else if !constexpr.contains(kp) && node.kind() == "identifier" {
            as_scalar.insert(who);
        } else if constexpr.contains(kp) && node.kind() == "identifier" {
            as_constexpr.insert(who);
        }
    }

    // shape variables and each tensor's dims
    let mut shape_vars: Vec<String> = Vec::new();
    let add_var = |v: &str, vars: &mut Vec<String>| {
        if !vars.iter().any(|x| x == v) {
            vars.push(v.to_string());
        }
    };
    for dims in unpacked.values() {
        for d in dims {
            add_var(d, &mut shape_vars);
        }
    }
    for (_, _, v) in &indexed {
        add_var(v, &mut shape_vars);
    }
    let mut dims_of: BTreeMap<String, (Vec<String>, bool)> = BTreeMap::new();
    for (t, dims) in &unpacked {
        dims_of.insert(t.clone(), (dims.clone(), false));
    }
    for (t, _, _) in &indexed {
        if dims_of.contains_key(t) {
            continue;
        }
        let mut idx: Vec<(i64, String)> =
            indexed.iter().filter(|(u, _, _)| u == t).map(|(_, i, v)| (*i, v.clone())).collect();
        idx.sort_by_key(|(i, _)| if *i < 0 { i64::MAX / 2 + i } else { *i });
        let exact = idx.iter().enumerate().all(|(k, (i, _))| *i == k as i64);
        // `HV = v.shape[2]`, `V = v.shape[-1]`: at least four dims, the first two unnamed; a
        // tensor the launcher unpacks whole with as many dims names them (`B, T` of `k`)
        // (`HQ = q.shape[2]` beside `*k.shape` of four: q is taken as k's rank, HQ in its third place)
        let placed = (!exact).then(|| flow::placed_dims(&idx)).flatten().and_then(|placed| {
            let like = unpacked.values().filter(|d| d.len() >= placed.len()).max_by_key(|d| d.len())?;
            let placed = flow::placed_dims_at(&idx, like.len())?;
            Some(placed.iter().zip(like).map(|(p, l)| p.clone().unwrap_or_else(|| l.clone())).collect())
        });
        let dims = placed.unwrap_or_else(|| idx.into_iter().map(|(_, v)| v).collect());
        dims_of.insert(t.clone(), (dims, !exact));
    }

    // the launcher's parameters: tensors and scalars, in order
    let mut args: Vec<Arg> = Vec::new();
    let scalar_like = |p: &Param| {
        p.default.as_deref().is_some_and(|d| is_numeric_literal(d) || matches!(d.trim(), "True" | "False"))
            || p.annotation.as_deref().is_some_and(is_scalar_annotation)
    };
    // integer scalars make shape variables when the source names none
    let int_scalars: Vec<String> = lparams
        .iter()
        .filter(|p| {
            !as_pointer.contains_key(&p.name)
                && (p.annotation.as_deref() == Some("int")
                    || (p.annotation.is_none() && p.default.is_none() && as_scalar.contains(&p.name)))
        })
        .map(|p| p.name.clone())
        .collect();
    if shape_vars.is_empty() {
        shape_vars.extend(int_scalars.iter().cloned());
    }
    let mut optional: Vec<String> = Vec::new();
    for p in &lparams {
        let tensorish = as_pointer.contains_key(&p.name)
            || (!scalar_like(p) && !as_scalar.contains(&p.name) && attr_used.contains(&p.name))
            || p.annotation.as_deref().is_some_and(|a| a.contains("Tensor"));
        if tensorish && !scalar_like(p) {
            let (ld, st) = as_pointer.get(&p.name).copied().unwrap_or((true, false));
            let (role, mut why) = match (ld, st) {
                (true, true) => (Role::InOut, format!("{entry} loads from and stores to it (in place)")),
                (false, true) => (Role::Output, format!("{entry} stores to it")),
                _ => (Role::Input, format!("{entry} reads it")),
            };
            if role == Role::Input && p.default.as_deref().map(str::trim) == Some("None") {
                // `weight=None`: the checks run cases with and without it (OPTIONAL)
                optional.push(p.name.clone());
                why.push_str("; optional (None by default)");
            }
            args.push(Arg { name: p.name.clone(), tensor: None, role, value: None, returned: false, why });
        } else {
            // a number defaulting to None (`scale: float | None = None`) that neither the launcher
            // nor the kernel's heuristics test for None reaches the kernel's arithmetic as None
            let none_reaches_math = |d: &str, a: Option<&str>| {
                let number = a.is_some_and(|a| a.contains("float") || a.contains("int"));
                let tested = |n: &str| {
                    [format!("{n} is None"), format!("{n} is not None"), format!("\"{n}\"] is not None")]
                        .iter()
                        .any(|t| node_text(launcher, text).contains(t.as_str()) || text.contains(&format!("\"{n}\"]")))
                };
                let kernel_names: Vec<String> = passed_nodes
                    .iter()
                    .filter(|(_, n)| n.kind() == "identifier" && node_text(**n, text) == p.name)
                    .map(|(kp, _)| kp.clone())
                    .collect();
                d.trim() == "None"
                    && number
                    && !kernel_names.is_empty()
                    && !tested(&p.name)
                    && !kernel_names.iter().any(|k| tested(k))
            };
            let value = match (&p.default, p.annotation.as_deref()) {
                (Some(d), a) if none_reaches_math(d, a) => {
                    let float = a.is_some_and(|a| a.contains("float"));
                    Some((if float { "1.0" } else { "1" }.to_string(), true))
                }
                (Some(d), _) => Some((d.clone(), false)),
                _ if shape_vars.contains(&p.name) => Some((format!("shape[\"{}\"]", p.name), false)),
                // an optional object that is no number (`process_group: ProcessGroup | None`)
                (None, Some(a))
                    if (a.split('|').map(str::trim).any(|t| t == "None") || a.trim().starts_with("Optional["))
                        && !["int", "float", "bool"].iter().any(|t| a.contains(t)) =>
                {
                    Some(("None".into(), false))
                }
                (None, Some("float")) => Some(("1.0".into(), true)),
                (None, Some("bool")) => Some(("False".into(), true)),
                _ => Some(("1".into(), true)),
            };
            let why = match &p.default {
                Some(d) => format!("a scalar (default {d})"),
                None => "a scalar".into(),
            };
            args.push(Arg { name: p.name.clone(), tensor: None, role: Role::Input, value, returned: false, why });
        }
    }
    // a default that is no value the harness can pass (`output_dtype: torch.dtype = torch.float32`):
    // at the end of the parameters the launcher keeps its own (the parameter leaves ARGS); before
    // others, None is passed and marked TODO
    let literal = |d: &str| {
        let d = d.trim();
        is_numeric_literal(d) || matches!(d, "True" | "False" | "None") || d.starts_with(['"', '\''])
    };
    let not_a_value =
        |a: &Arg| a.value.as_ref().is_some_and(|(v, guessed)| !guessed && !v.starts_with("shape[") && !literal(v));
    while let Some(a) = args.pop_if(|a| not_a_value(a)) {
        let default = a.value.map(|(v, _)| v).unwrap_or_default();
        filled
            .push(format!("{}: left to {launcher_name}'s own default `{default}` (no value kidiom can pass)", a.name));
    }
    for a in args.iter_mut().filter(|a| not_a_value(a)) {
        let default = a.value.take().map(|(v, _)| v).unwrap_or_default();
        a.why = format!("a scalar whose default `{default}` is no value kidiom can pass: None given");
        a.value = Some(("None".into(), true));
    }
    // what a returned value is: the allocation or parameter it is the very value of
    let resolve_exact = |name: &str| follow(name, &exact_alias, &is_launcher_name);
    for r in returned.iter().flatten() {
        let who = resolve_exact(r);
        if allocated.contains_key(&who) && !args.iter().any(|a| a.name == who) {
            let why = format!("{launcher_name} allocates and returns it");
            args.push(Arg { name: who, tensor: None, role: Role::Output, value: None, returned: true, why });
        }
    }
    // each returned value's place: an allocation the first time it is returned, else None (a
    // parameter, a slice or sum of one, the same output again)
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut return_places: Vec<Option<String>> = returned
        .iter()
        .map(|r| {
            let who = resolve_exact(r.as_deref()?);
            (args.iter().any(|a| a.name == who && a.returned) && placed.insert(who.clone())).then_some(who)
        })
        .collect();
    while return_places.last().is_some_and(Option::is_none) {
        return_places.pop();
    }
    // dims: unpacked or indexed; an allocation `*_like(t)` has t's; else a guess
    if shape_vars.is_empty() {
        shape_vars.push("N".into());
    }
    let last = shape_vars.last().cloned().unwrap_or_else(|| "N".into());
    let kernel_params_of = |name: &str| -> Vec<String> {
        passed_nodes
            .iter()
            .filter(|(_, n)| identifiers(**n, text).first().is_some_and(|f| resolve(f) == name))
            .map(|(kp, _)| kp.clone())
            .collect()
    };
    // the dims each pointer's address arithmetic gives (strides in sizes the launcher names)
    let size = |kname: &str| {
        let arg = passed.get(kname)?.trim();
        shape_vars.iter().find(|v| v.as_str() == arg).cloned()
    };
    // with what the kernel adds to the pointer itself (`q += (bos * H + i_h) * K`)
    // or a block pointer's base and strides
    let moves = |p: &str| rhs_nodes.get(p).into_iter().flatten().copied();
    // a local offset assigned once (`p = (i_t * H + i_h) * K + o_k`, then `tl.load(g + p)`) is read
    // through where the address alone says no dims (its layout is kept apart: `o_k` stays `o_k`)
    let once = |name: &str| match rhs_nodes.get(name).map(Vec::as_slice) {
        Some([one]) if !pnames.contains(name) => Some(*one),
        _ => None,
    };
    let layout_of = |p: &String, through: bool| {
        let none = |_: &str| None;
        let local: strides::Locals<'_, '_> = if through { &once } else { &none };
        first_address
            .get(p)
            .and_then(|e| {
                let parts: Vec<Node<'_>> = std::iter::once(*e).chain(moves(p)).collect();
                strides::layout(&parts, &[], p, text, &size, local)
            })
            .or_else(|| {
                let (base, block_strides) = block_pointers.get(p)?;
                let parts: Vec<Node<'_>> = std::iter::once(*base).chain(moves(p)).collect();
                strides::layout(&parts, block_strides, p, text, &size, local)
            })
    };
    let pointer_names: BTreeSet<&String> = first_address.keys().chain(block_pointers.keys()).collect();
    let layouts: BTreeMap<String, strides::Layout> =
        pointer_names.iter().filter_map(|p| Some(((*p).clone(), layout_of(p, false)?))).collect();
    let read_through: BTreeMap<String, strides::Layout> =
        pointer_names.iter().filter_map(|p| Some(((*p).clone(), layout_of(p, true)?))).collect();
    // a kernel parameter's layouts, as addressed and read through its locals
    let layouts_of = |kp: &str| [layouts.get(kp), read_through.get(kp)].into_iter().flatten();
    let all_layouts: Vec<&strides::Layout> = layouts.values().chain(read_through.values()).collect();
    // a tensor whose rank only its indexed sizes guessed (`D = x.shape[-1]` beside `*g.shape`):
    // the strides of its address say more where they keep each indexed size in its place
    // (ranges from the tensors the launcher unpacks whole only: the guesses are what is in doubt)
    let mut strided_names: BTreeSet<String> = BTreeSet::new();
    let exact_layouts: Vec<(&strides::Layout, &[String])> = dims_of
        .iter()
        .filter(|(_, (_, guessed))| !*guessed)
        .flat_map(|(name, (dims, _))| {
            kernel_params_of(name).into_iter().flat_map(|kp| layouts_of(&kp)).map(move |l| (l, dims.as_slice()))
        })
        .collect();
    let exact_ranges = strides::index_ranges(&all_layouts, &exact_layouts);
    let mut better: Vec<(String, Vec<String>)> = Vec::new();
    for (name, (dims, guessed)) in &dims_of {
        let Some(d) = guessed
            .then(|| {
                kernel_params_of(name)
                    .iter()
                    .flat_map(|kp| layouts_of(kp))
                    .find_map(|l| strides::dims(l, &exact_ranges))
            })
            .flatten()
        else {
            continue;
        };
        let keeps = indexed.iter().filter(|(t, _, _)| t == name).all(|(_, i, v)| {
            let at = if *i >= 0 {
                usize::try_from(*i).ok()
            } else {
                usize::try_from(-*i).ok().and_then(|b| d.len().checked_sub(b))
            };
            at.and_then(|a| d.get(a)) == Some(v)
        });
        if keeps && d != *dims {
            better.push((name.clone(), d));
        }
    }
    for (name, d) in better {
        dims_of.insert(name.clone(), (d, true));
        strided_names.insert(name);
    }
    let snapshot: BTreeMap<String, (Vec<String>, bool)> = dims_of.clone();
    let mut unread: Vec<String> = Vec::new();
    for a in args.iter_mut() {
        let is_tensor = a.returned || as_pointer.contains_key(&a.name) || a.value.is_none();
        if !is_tensor {
            continue;
        }
        let like = allocated.get(&a.name).cloned().flatten();
        let dims = snapshot
            .get(&a.name)
            .cloned()
            .or_else(|| alloc_dims.get(&a.name).map(|d| (d.clone(), !d.iter().all(|x| shape_vars.contains(x)))))
            .or_else(|| like.as_ref().and_then(|l| snapshot.get(l).cloned()));
        if dims.is_none() {
            unread.push(a.name.clone());
        }
        let dims = dims.unwrap_or_else(|| (vec![last.clone()], true));
        let mut t = Tensor::new(dims.0, dims.1);
        if strided_names.contains(&a.name) || like.as_ref().is_some_and(|l| strided_names.contains(l)) {
            t.guessed_from = Some("the strides of its address in the kernel");
        }
        a.tensor = Some(t);
    }
    // what else says an unread tensor's shape: an allocation the defaults skip for a name that
    // becomes this tensor (`final_state = initial_state`), or a tensor the kernel addresses alike
    let known: BTreeMap<String, Vec<String>> = args
        .iter()
        .filter(|a| !unread.contains(&a.name))
        .filter_map(|a| a.tensor.as_ref().map(|t| (a.name.clone(), t.dims.clone())))
        .collect();
    let still: Vec<String> = unread.clone();
    let known_layouts: Vec<(&strides::Layout, &[String])> = known
        .iter()
        .flat_map(|(name, dims)| {
            kernel_params_of(name).into_iter().flat_map(|kp| layouts_of(&kp)).map(move |l| (l, dims.as_slice()))
        })
        .collect();
    let index_ranges = strides::index_ranges(&all_layouts, &known_layouts);
    for a in args.iter_mut().filter(|a| still.contains(&a.name)) {
        let hinted = local_alias
            .iter()
            .filter(|(local, to)| *to == &a.name && resolve(local) == a.name)
            .find_map(|(local, _)| alloc_hints.get(local).map(|(_, d)| d.clone()));
        let alike = || {
            let mine: Vec<&String> = kernel_params_of(&a.name).iter().filter_map(|kp| addressed.get(kp)).collect();
            known.iter().find_map(|(other, dims)| {
                let theirs = kernel_params_of(other);
                theirs.iter().filter_map(|kp| addressed.get(kp)).any(|sig| mine.contains(&sig)).then(|| dims.clone())
            })
        };
        let strided = || {
            kernel_params_of(&a.name).iter().flat_map(|kp| layouts_of(kp)).find_map(|l| strides::dims(l, &index_ranges))
        };
        let from_strides = hinted.is_none().then(strided).flatten();
        if let Some(dims) = hinted.or(from_strides.clone()).or_else(alike) {
            let mut t = Tensor::new(dims, true);
            if from_strides.is_some() {
                t.guessed_from = Some("the strides of its address in the kernel");
            }
            a.tensor = Some(t);
            unread.retain(|u| u != &a.name);
        }
    }
    // a written tensor whose shape nothing says is most often shaped like the largest input
    // (row-wise and element-wise kernels): a better guess than one dimension, still marked TODO;
    // so is an input the kernel never receives (the launcher hands it to another function: FLA's
    // `v` in its intra-chunk launchers)
    let widest = args
        .iter()
        .filter(|a| a.role == Role::Input && !unread.contains(&a.name))
        .filter_map(|a| a.tensor.as_ref().filter(|t| !t.guessed).map(|t| t.dims.clone()))
        .max_by_key(|d| d.len());
    if let Some(widest) = widest {
        let elsewhere = |a: &Arg| a.role == Role::Input && kernel_params_of(&a.name).is_empty();
        for a in args.iter_mut().filter(|a| (a.role != Role::Input || elsewhere(a)) && unread.contains(&a.name)) {
            // a reduction's result has one dimension fewer (the reduced one, the last assumed)
            let dims = if reductions.contains(&a.name) && widest.len() > 1 {
                widest[..widest.len() - 1].to_vec()
            } else {
                widest.clone()
            };
            a.tensor = Some(Tensor::new(dims, true));
        }
    }
    if !unpacked.is_empty() || !indexed.is_empty() {
        filled.push(format!("shape variables {} from {launcher_name}", shape_vars.join(", ")));
    }
    // a size the launcher computes and allocates with (`N = B if cu_seqlens is None else ...`,
    // then `q.new_empty(N, HV, K, V)`): a shape variable of its own, so the contract and the
    // manifest's formulas name nothing undefined (its relation to the others is the user's)
    let computed: Vec<String> = args
        .iter()
        .filter_map(|a| a.tensor.as_ref())
        .flat_map(|t| t.dims.iter())
        .filter(|d| is_python_name(d) && !shape_vars.contains(*d))
        .cloned()
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    for v in computed {
        filled.push(format!("{v}: a size {launcher_name} computes and allocates with; a shape variable here"));
        shape_vars.push(v);
    }
    // dtypes an annotation names (`torch.LongTensor`), and index tensors: integers; an optional
    // one is left out of the cases (None), as random values would address out of bounds
    for a in args.iter_mut() {
        let annotation = lparams.iter().find(|p| p.name == a.name).and_then(|p| p.annotation.clone());
        let index = kernel_params_of(&a.name).iter().any(|kp| index_of.contains(kp));
        let Some(t) = a.tensor.as_mut() else { continue };
        match annotation.as_deref() {
            Some(an) if an.contains("LongTensor") => (t.dtype, t.dtype_read) = ("int64", true),
            Some(an) if an.contains("IntTensor") => (t.dtype, t.dtype_read) = ("int32", true),
            _ if index => t.dtype = "int32",
            _ => {}
        }
        if index && a.role == Role::Input {
            t.index = true;
            if optional.contains(&a.name) {
                t.absent = true;
                optional.retain(|o| o != &a.name);
                a.why = format!(
                    "{entry} reads it as indices (its values address other tensors); optional: left None, \
                     valid indices are yours to make"
                );
            } else {
                a.why = format!("{entry} reads it as indices (its values address other tensors)");
            }
        }
    }
    let fixed: Vec<String> = args
        .iter()
        .filter(|a| a.role == Role::Input && a.tensor.is_none() && paths.structural.contains(&a.name))
        .map(|a| a.name.clone())
        .collect();
    for f in &fixed {
        let default = flags.get(f).map_or("its default", |v| if *v { "True" } else { "False" });
        filled
            .push(format!("{f}: changes what {launcher_name} allocates or aliases; checked at {default} only (FIXED)"));
    }
    for a in &args {
        let reduction = if reductions.contains(&a.name) { " (a reduction's result)" } else { "" };
        filled.push(format!("{}: {}{reduction}", a.name, a.why));
    }
    let reductions: Vec<String> =
        args.iter().filter(|a| a.role != Role::Input && reductions.contains(&a.name)).map(|a| a.name.clone()).collect();
    let constexpr_sizes: Vec<String> = shape_vars.iter().filter(|v| as_constexpr.contains(*v)).cloned().collect();
    Ok(Read {
        fixed,
        language: "triton",
        entry,
        launcher: Some(launcher_name),
        args,
        shape_vars,
        cuda_params: Vec::new(),
        optional,
        others,
        return_places,
        reductions,
        constexpr_sizes,
        filled,
    })
}

/// A plain Python name (a dimension that is a variable, not an expression or a number).
fn is_python_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_') && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// The name `name` stands for: followed through `alias` (local -> the name it is made from) until
/// `stop` holds or the chain ends (at most 16 steps: a cycle ends too).
fn follow(name: &str, alias: &BTreeMap<String, String>, stop: &dyn Fn(&str) -> bool) -> String {
    let mut n = name.to_string();
    for _ in 0..16 {
        if stop(&n) {
            break;
        }
        match alias.get(&n) {
            Some(f) => n = f.clone(),
            None => break,
        }
    }
    n
}

/// The class whose `forward` `f` is, where that class is an autograd Function
/// (`class F(torch.autograd.Function)`, `class F(Function)`).
fn autograd_function_of(f: Node<'_>, text: &str) -> Option<String> {
    if f.child_by_field_name("name").map(|n| node_text(n, text)) != Some("forward") {
        return None;
    }
    let mut p = f.parent()?;
    if p.kind() == "decorated_definition" {
        p = p.parent()?;
    }
    let class = p.parent().filter(|c| p.kind() == "block" && c.kind() == "class_definition")?;
    let bases = class.child_by_field_name("superclasses").map(|b| node_text(b, text))?;
    bases.contains("Function").then(|| class.child_by_field_name("name").map(|n| node_text(n, text).to_string()))?
}

/// The local a returned expression is: `y`, or `y` seen through the methods that give its values
/// another shape, layout or dtype (`y.view(x_shape)`, `rstd.view(*lead).contiguous()`,
/// `k_precond.to(k.dtype)`); not a slice or an expression of it.
fn returned_tensor(e: Node<'_>, text: &str) -> Option<String> {
    const SAME_VALUES: [&str; 15] = [
        "view",
        "reshape",
        "view_as",
        "reshape_as",
        "contiguous",
        "squeeze",
        "unsqueeze",
        "flatten",
        "to",
        "float",
        "half",
        "bfloat16",
        "type_as",
        "clone",
        "detach",
    ];
    // `y.float().contiguous()...`: through every same-value method, without recursion
    let mut e = e;
    for _ in 0..64 {
        match e.kind() {
            "identifier" => return Some(node_text(e, text).to_string()),
            "call" => {
                let f = e.child_by_field_name("function").filter(|f| f.kind() == "attribute")?;
                let method = f.child_by_field_name("attribute").map(|a| node_text(a, text))?;
                SAME_VALUES.contains(&method).then_some(())?;
                e = f.child_by_field_name("object")?;
            }
            _ => return None,
        }
    }
    None
}

/// The dims of `torch.empty((M, N), ...)` or `torch.empty(M, N, ...)`:
/// names or integers only (`x.new_empty(...)` has none readable).
fn allocation_dims(call: Node<'_>, text: &str) -> Option<Vec<String>> {
    let args = call.child_by_field_name("arguments")?;
    let mut c = args.walk();
    let positional: Vec<Node<'_>> =
        args.named_children(&mut c).filter(|a| !matches!(a.kind(), "keyword_argument" | "comment")).collect();
    let dims: Vec<String> = match positional.as_slice() {
        [one] if matches!(one.kind(), "tuple" | "list") => {
            let mut c = one.walk();
            one.named_children(&mut c).map(|d| node_text(d, text).to_string()).collect()
        }
        many => many.iter().map(|d| node_text(*d, text).to_string()).collect(),
    };
    let simple = |d: &String| is_name(d) || d.parse::<u64>().is_ok();
    (!dims.is_empty() && dims.iter().all(simple)).then_some(dims)
}

/// The shapes a tuple assignment to `names` unpacks: `x.shape` (every name a dim of x), or a
/// list of parts, each `*t.shape` (as many dims as the other parts leave: at most one such part),
/// `t.shape[i]` / `t.size(i)` / `len(t)` (one dim, pushed to `indexed`). `[(tensor, dims)]`.
fn unpack_shapes(
    names: &[String],
    right: Node<'_>,
    text: &str,
    indexed: &mut Vec<(String, i64, String)>,
) -> Vec<(String, Vec<String>)> {
    let rt = node_text(right, text).trim();
    if let Some(t) = rt.strip_suffix(".shape").filter(|t| is_name(t)) {
        return vec![(t.to_string(), names.to_vec())];
    }
    // `H, K = g.shape[-2:]`, `T, H = x.shape[1:3]`: each name a size in its place
    if let Some(places) = shape_slice(rt, names.len()) {
        for (name, (t, i)) in names.iter().zip(places) {
            indexed.push((t, i, name.clone()));
        }
        return Vec::new();
    }
    if !matches!(right.kind(), "expression_list" | "tuple") {
        return Vec::new();
    }
    // `*k.shape`: tree-sitter-python reads it as the attribute `shape` of the splat `*k`
    let splat_of = |p: Node<'_>| -> Option<String> {
        let inner = match p.kind() {
            "list_splat" => p.named_child(0).map(|e| node_text(e, text).trim().to_string()),
            "attribute" => {
                let obj = p.child_by_field_name("object").filter(|o| o.kind() == "list_splat")?;
                let attr = p.child_by_field_name("attribute").map(|a| node_text(a, text))?;
                obj.named_child(0).map(|e| format!("{}.{attr}", node_text(e, text).trim()))
            }
            _ => None,
        }?;
        inner.strip_suffix(".shape").filter(|t| is_name(t)).map(str::to_string)
    };
    let is_splat = |p: &Node<'_>| {
        p.kind() == "list_splat"
            || (p.kind() == "attribute" && p.child_by_field_name("object").is_some_and(|o| o.kind() == "list_splat"))
    };
    let mut c = right.walk();
    let parts: Vec<Node<'_>> = right.named_children(&mut c).filter(|p| p.kind() != "comment").collect();
    let splats = parts.iter().filter(|p| is_splat(p)).count();
    // a splat takes at least one name; without one, a name per part
    if splats > 1 || (splats == 0 && parts.len() != names.len()) || (splats == 1 && parts.len() > names.len()) {
        return Vec::new();
    }
    let spread = names.len() + 1 - parts.len(); // the names a splat takes
    let (mut out, mut at) = (Vec::new(), 0);
    for p in parts {
        if is_splat(&p) {
            let Some(t) = splat_of(p) else { return Vec::new() };
            out.push((t, names[at..at + spread].to_vec()));
            at += spread;
        } else {
            if let Some((t, i)) = shape_index(node_text(p, text)) {
                indexed.push((t, i, names[at].clone()));
            }
            at += 1;
        }
    }
    out
}

/// The (name, right-hand side) pairs an assignment binds: `x = e`; `a, b = e1, e2` (or
/// `(e1, e2)`) element by element; `a, b = e` binds each name to all of `e`.
fn assigned_parts<'t>(l: Node<'t>, r: Node<'t>, text: &str) -> Vec<(String, Node<'t>)> {
    match l.kind() {
        "identifier" => vec![(node_text(l, text).to_string(), r)],
        "pattern_list" | "tuple_pattern" => {
            let mut c = l.walk();
            let names: Vec<Node<'t>> = l.named_children(&mut c).collect();
            let r = if r.kind() == "parenthesized_expression" { r.named_child(0).unwrap_or(r) } else { r };
            let parts: Vec<Node<'t>> = if matches!(r.kind(), "expression_list" | "tuple") {
                let mut c = r.walk();
                r.named_children(&mut c).filter(|p| p.kind() != "comment").collect()
            } else {
                Vec::new()
            };
            names
                .iter()
                .enumerate()
                .filter(|(_, n)| n.kind() == "identifier")
                .map(|(i, n)| (node_text(*n, text).to_string(), if parts.len() == names.len() { parts[i] } else { r }))
                .collect()
        }
        _ => Vec::new(),
    }
}

fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_alphabetic() || f == '_') && c.all(|x| x.is_alphanumeric() || x == '_')
}

/// The places `n` names take in a slice of a shape (`g.shape[-2:]` with two names: -2 and -1;
/// `x.shape[1:3]`: 1 and 2), each with the tensor; None where the slice's length is not `n`,
/// and for a slice from the front (`x.shape[:2]`), which would read as the whole shape.
fn shape_slice(s: &str, n: usize) -> Option<Vec<(String, i64)>> {
    let (t, rest) = s.trim().split_once(".shape[")?;
    let (a, b) = rest.strip_suffix(']')?.split_once(':')?;
    let (a, b) = (a.trim(), b.trim());
    let n = i64::try_from(n).ok()?;
    let start: i64 = if a.is_empty() { 0 } else { a.parse().ok()? };
    let end: i64 = if b.is_empty() { if start < 0 { 0 } else { start + n } } else { b.parse().ok()? };
    // both ends on one side of the shape, `n` long
    let fits = (start >= 0 && end >= start) || (start < 0 && end <= 0);
    (is_name(t) && n > 0 && start != 0 && fits && end - start == n)
        .then(|| (start..end).map(|i| (t.to_string(), i)).collect())
}

/// `x.shape[-1]`, `x.size(1)` or `len(x)` -> (`x`, -1).
fn shape_index(s: &str) -> Option<(String, i64)> {
    let s = s.trim();
    if let Some(t) = s.strip_prefix("len(").and_then(|r| r.strip_suffix(')')).map(str::trim) {
        return is_name(t).then(|| (t.to_string(), 0));
    }
    if let Some((t, rest)) = s.split_once(".shape[") {
        let i = rest.strip_suffix(']')?.trim().parse().ok()?;
        return is_name(t).then(|| (t.to_string(), i));
    }
    if let Some((t, rest)) = s.split_once(".size(") {
        let i = rest.strip_suffix(')')?.trim().parse().ok()?;
        return is_name(t).then(|| (t.to_string(), i));
    }
    None
}

/// A CUDA parameter: its name, whether a pointer, const, and its type text.
struct CParam {
    name: String,
    pointer: bool,
    constant: bool,
    ty: String,
}

fn read_cuda(text: &str) -> std::result::Result<Read, String> {
    let tree = parse_tree(Lang::Cuda, text).map_err(|s| s.to_string())?.ok_or("no parser for CUDA")?;
    let root = tree.root_node();
    let globals: Vec<Node<'_>> = kernel_ranges(Lang::Cuda, text, &tree)
        .into_iter()
        .filter(|k| k.kind == KernelKind::Global)
        .filter_map(|k| {
            let mut n = root.descendant_for_byte_range(k.range.start, k.range.end)?;
            // the definition itself, not a node inside it
            loop {
                if n.kind() == "function_definition" {
                    return Some(n);
                }
                let mut c = n.walk();
                if let Some(f) = n.named_children(&mut c).find(|x| x.kind() == "function_definition") {
                    return Some(f);
                }
                n = n.parent()?;
            }
        })
        .collect();
    if globals.is_empty() {
        return Err("no extern \"C\" __global__ kernel here (kidiom init reads a Triton kernel and the function \
                    that launches it, or an extern \"C\" __global__ CUDA kernel)"
            .into());
    }
    let extern_c = |f: Node<'_>| {
        let mut up = Some(f);
        while let Some(n) = up {
            if n.kind() == "linkage_specification" && node_text(n, text).trim_start().starts_with("extern \"C\"") {
                return true;
            }
            up = n.parent();
        }
        false
    };
    let Some(&kernel) = globals.iter().find(|f| extern_c(**f)) else {
        let names: Vec<String> = globals.iter().filter_map(|f| name_of(*f, text).map(|(n, _)| n)).collect();
        return Err(format!(
            "the __global__ kernel {} is not extern \"C\" (the harness loads a kernel by its unmangled \
             name: declare it extern \"C\" __global__)",
            names.join(", ")
        ));
    };
    let (entry, plist) = name_of(kernel, text).ok_or("a __global__ function without a name")?;
    let mut params: Vec<CParam> = Vec::new();
    let mut c = plist.walk();
    for p in plist.named_children(&mut c).filter(|p| p.kind() == "parameter_declaration") {
        let Some(d) = p.child_by_field_name("declarator") else { continue };
        let mut id = d;
        let mut pointer = false;
        loop {
            if matches!(id.kind(), "pointer_declarator" | "abstract_pointer_declarator") {
                pointer = true;
            }
            match id.child_by_field_name("declarator") {
                Some(inner) => id = inner,
                None => break,
            }
        }
        let name = node_text(id, text).to_string();
        let full = node_text(p, text);
        let before_star = full.split('*').next().unwrap_or("");
        let constant = pointer && before_star.split_whitespace().any(|w| w == "const");
        let ty = p.child_by_field_name("type").map(|t| node_text(t, text).to_string()).unwrap_or_default();
        params.push(CParam { name, pointer, constant, ty });
    }
    // which pointers the body writes (`p[i] = ...`, `*p = ...`, `p[i] += ...`, atomics) and reads
    let names: BTreeSet<String> = params.iter().filter(|p| p.pointer).map(|p| p.name.clone()).collect();
    let mut alias: BTreeMap<String, String> = BTreeMap::new();
    // where each pointer is first written and read (a compound assignment reads first)
    let (mut written, mut read): (BTreeMap<String, usize>, BTreeMap<String, usize>) =
        (BTreeMap::new(), BTreeMap::new());
    let note_at = |m: &mut BTreeMap<String, usize>, k: String, at: usize| {
        let e = m.entry(k).or_insert(usize::MAX);
        *e = (*e).min(at);
    };
    if let Some(body) = kernel.child_by_field_name("body") {
        let base = |n: Node<'_>, alias: &BTreeMap<String, String>| -> Option<String> {
            let mut x = n;
            while matches!(x.kind(), "subscript_expression" | "pointer_expression" | "parenthesized_expression") {
                x = x.child_by_field_name("argument").or_else(|| x.named_child(0))?;
            }
            let id = node_text(x, text).to_string();
            let id = alias.get(&id).cloned().unwrap_or(id);
            names.contains(&id).then_some(id)
        };
        preorder(body, |n| {
            match n.kind() {
                "init_declarator" => {
                    if let (Some(d), Some(v)) = (n.child_by_field_name("declarator"), n.child_by_field_name("value"))
                        && d.kind() == "pointer_declarator"
                    {
                        let mut id = d;
                        while let Some(i) = id.child_by_field_name("declarator") {
                            id = i;
                        }
                        let from = ident_first(v, text);
                        if let Some(f) = from.filter(|f| names.contains(f)) {
                            alias.insert(node_text(id, text).to_string(), f);
                        }
                    }
                }
                "assignment_expression" => {
                    if let Some(l) = n.child_by_field_name("left")
                        && let Some(b) = base(l, &alias)
                    {
                        let op = n.child_by_field_name("operator").map(|o| node_text(o, text)).unwrap_or("=");
                        let at = n.start_byte();
                        if op != "=" {
                            note_at(&mut read, b.clone(), at);
                        }
                        note_at(&mut written, b, at + 1);
                    }
                }
                "subscript_expression" | "pointer_expression" => {
                    let is_left = n.parent().is_some_and(|p| {
                        p.kind() == "assignment_expression"
                            && p.child_by_field_name("left").is_some_and(|l| l.id() == n.id())
                    });
                    if !is_left && let Some(b) = base(n, &alias) {
                        note_at(&mut read, b, n.start_byte());
                    }
                }
                "call_expression" => {
                    let f = n.child_by_field_name("function").map(|f| node_text(f, text)).unwrap_or("");
                    if f.starts_with("atomic")
                        && let Some(first) = n.child_by_field_name("arguments").and_then(|a| a.named_child(0))
                        && let Some(id) = ident_first(first, text)
                    {
                        let id = alias.get(&id).cloned().unwrap_or(id);
                        if names.contains(&id) {
                            note_at(&mut read, id.clone(), n.start_byte());
                            note_at(&mut written, id, n.start_byte() + 1);
                        }
                    }
                }
                _ => {}
            }
            true
        });
    }
    let mut args = Vec::new();
    let mut shape_vars = Vec::new();
    let mut cuda_params = Vec::new();
    let mut filled = vec![format!("extern \"C\" __global__ kernel {entry}, {} parameters", params.len())];
    let is_int = |t: &str| {
        let t = t.trim();
        t.contains("int") || t.contains("long") || t.contains("size_t") || t == "short" || t == "unsigned"
    };
    for p in &params {
        if p.pointer {
            let (role, why) = if p.constant {
                (Role::Input, "a const pointer".to_string())
            } else {
                match (written.get(&p.name), read.get(&p.name)) {
                    (Some(w), Some(r)) if r < w => (Role::InOut, format!("{entry} reads and writes it (in place)")),
                    (Some(_), _) => (Role::Output, format!("{entry} writes it")),
                    _ => (Role::Input, format!("{entry} reads it")),
                }
            };
            filled.push(format!("{}: {why}", p.name));
            args.push(Arg { name: p.name.clone(), tensor: None, role, value: None, returned: false, why });
            cuda_params.push(CudaParam::Arg(p.name.clone()));
        } else if is_int(&p.ty) {
            filled.push(format!("{}: an integer ({}), a shape variable", p.name, p.ty));
            shape_vars.push(p.name.clone());
            cuda_params.push(CudaParam::Int(p.name.clone()));
        } else {
            let why = format!("a scalar ({})", p.ty);
            filled.push(format!("{}: {why}", p.name));
            let value = if p.ty.contains("bool") { "False" } else { "1.0" };
            args.push(Arg {
                name: p.name.clone(),
                tensor: None,
                role: Role::Input,
                value: Some((value.into(), true)),
                returned: false,
                why,
            });
            cuda_params.push(CudaParam::Arg(p.name.clone()));
        }
    }
    if shape_vars.is_empty() {
        shape_vars.push("N".into());
    }
    let last = shape_vars.last().cloned().unwrap_or_else(|| "N".into());
    for (a, p) in args.iter_mut().zip(params.iter().filter(|p| p.pointer || !is_int(&p.ty))) {
        if p.pointer {
            a.tensor = Some(Tensor::new(vec![last.clone()], true));
        }
    }
    Ok(Read {
        fixed: Vec::new(),
        language: "cuda",
        entry,
        launcher: None,
        args,
        shape_vars,
        cuda_params,
        optional: Vec::new(),
        return_places: Vec::new(),
        others: Vec::new(),
        reductions: Vec::new(),
        constexpr_sizes: Vec::new(),
        filled,
    })
}

/// A C function definition's name and parameter list.
fn name_of<'t>(f: Node<'t>, text: &str) -> Option<(String, Node<'t>)> {
    let mut d = f.child_by_field_name("declarator")?;
    while d.kind() != "function_declarator" {
        d = d.child_by_field_name("declarator")?;
    }
    let name = d.child_by_field_name("declarator").map(|n| node_text(n, text).to_string())?;
    Some((name, d.child_by_field_name("parameters")?))
}

fn ident_first(n: Node<'_>, text: &str) -> Option<String> {
    let mut out = None;
    preorder(n, |c| {
        if out.is_some() {
            return false;
        }
        if c.kind() == "identifier" {
            out = Some(node_text(c, text).to_string());
            return false;
        }
        true
    });
    out
}

/// Sizes for the shape variables: small on a CPU, large on a GPU.
fn sizes(vars: &[String], small: bool) -> String {
    let vals: Vec<String> = vars
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let n = match (small, i) {
                (true, 0) if vars.len() > 1 => 3,
                (true, _) => 64,
                (false, 0) => 4096,
                (false, _) => 1024,
            };
            format!("{v} = {n}")
        })
        .collect();
    format!("{{ {} }}", vals.join(", "))
}

fn manifest_text(stem: &str, file: &str, contract: &str, r: &Read) -> (String, Vec<String>) {
    let mut todo = Vec::new();
    let mut s = String::new();
    s.push_str(&format!(
        "# The contract of {} ({file}), written by `kidiom init` (docs/CONTRACTS.md).\n\
         # A rewrite may change {file}; it may not change this file or {contract}.\n",
        r.entry
    ));
    s.push_str("format = 2\n");
    s.push_str(&format!("name = {}\n", toml_str(stem)));
    s.push_str(&format!("language = \"{}\"\n", r.language));
    s.push_str(&format!("source = {}\n", toml_str(file)));
    s.push_str(&format!("entry = {}\n", toml_str(&r.entry)));
    if let Some(l) = &r.launcher {
        s.push_str(&format!("launcher = {}\n", toml_str(l)));
    }
    s.push_str(&format!("contract = {}\n", toml_str(contract)));
    s.push_str(
        "\n[tolerance]              # against float64, every output (fp32 kernels: these suit most)\n\
         rel_l2 = 1e-5\nslice_rel_l2 = 1e-4\nmax_abs_rel = 1e-4\n",
    );
    let vars = &r.shape_vars;
    s.push_str(&format!("\n[shapes]                 # shape variables: {}\n", vars.join(", ")));
    s.push_str(&format!("cpu = [{}]   # TODO: sizes checked on the CPU (small)\n", sizes(vars, true)));
    s.push_str(&format!("gpu = [{}]   # TODO: sizes checked on a GPU\n", sizes(vars, false)));
    s.push_str(&format!("bench = {}     # TODO: the size timed\n", sizes(vars, false)));
    if !r.constexpr_sizes.is_empty() {
        // a tl.constexpr size (a tl.arange's length) may have to be a power of two: the contract
        // check's odd sizes keep it
        s.push_str(&format!(
            "exact = {}   # passed to a tl.constexpr: kept as given at the contract check's odd sizes\n",
            py_list(&r.constexpr_sizes.iter().map(String::as_str).collect::<Vec<_>>())
        ));
    }
    todo.push(format!("{stem}.toml: the [shapes] sizes (TODO) for {}", vars.join(", ")));
    // the floor: every tensor read or written once, 4 bytes an element (a guess)
    let mut terms = Vec::new();
    for a in &r.args {
        if let Some(t) = a.tensor.as_ref().filter(|t| !t.absent) {
            let n = t.dims.join(" * ");
            let times = if a.role == Role::InOut { "2 * " } else { "" };
            terms.push(format!("{times}{n}"));
        }
    }
    let bytes = if terms.is_empty() { "0".to_string() } else { format!("4 * ({})", terms.join(" + ")) };
    let flops = vars.join(" * ");
    s.push_str("\n[floor]                  # per call, in the shape variables\n");
    s.push_str(&format!("bytes = \"{bytes}\"   # TODO: every tensor once, fp32 assumed\n"));
    s.push_str(&format!("flops = \"{flops}\"   # TODO: the useful floating-point operations\n"));
    todo.push(format!("{stem}.toml: the [floor] bytes and flops (TODO)"));
    (s, todo)
}

/// The value a `tl.store(ptr, value, ...)` (or an atomic) writes: its
/// second positional argument or its `val`/`value` keyword, as text.
fn store_value(call: Node<'_>, text: &str) -> Option<String> {
    let args = call.child_by_field_name("arguments")?;
    let mut c = args.walk();
    let mut positional = 0;
    for a in args.named_children(&mut c) {
        if a.kind() == "keyword_argument" {
            let key = a.child_by_field_name("name").map(|k| node_text(k, text));
            if matches!(key, Some("val" | "value")) {
                return a.child_by_field_name("value").map(|v| node_text(v, text).to_string());
            }
        } else {
            positional += 1;
            if positional == 2 {
                return Some(node_text(a, text).to_string());
            }
        }
    }
    None
}

/// Whether a stored value is a reduction's result: it calls one (`tl.sum`,
/// `tl.max`, `tl.min`, `tl.reduce`, `tl.xor_sum`, a `.sum(...)` method),
/// directly or through the local names it is computed from (`assigned`).
fn is_reduction(value: &str, assigned: &BTreeMap<String, String>) -> bool {
    mentions(
        value,
        assigned,
        &["tl.sum(", "tl.max(", "tl.min(", "tl.reduce(", "tl.xor_sum(", ".sum(", ".max(", ".min("],
    )
}

/// Whether `expr` contains one of `calls`, directly or through the local
/// names it is computed from (`assigned`: each name's right-hand sides).
fn mentions(expr: &str, assigned: &BTreeMap<String, String>, calls: &[&str]) -> bool {
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut todo = vec![expr];
    while let Some(t) = todo.pop() {
        if calls.iter().any(|c| t.contains(c)) {
            return true;
        }
        for word in t.split(|ch: char| !(ch.is_alphanumeric() || ch == '_')) {
            if let Some((k, rhs)) = assigned.get_key_value(word)
                && seen.insert(k.as_str())
            {
                todo.push(rhs.as_str());
            }
        }
    }
    false
}

fn toml_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn py_list(names: &[&str]) -> String {
    let q: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    format!("[{}]", q.join(", "))
}

fn contract_text(stem: &str, file: &str, r: &Read) -> (String, Vec<String>) {
    let mut todo = Vec::new();
    let of = |role: Role| -> Vec<&str> { r.args.iter().filter(|a| a.role == role).map(|a| a.name.as_str()).collect() };
    let args: Vec<&str> = r.args.iter().filter(|a| !a.returned).map(|a| a.name.as_str()).collect();
    let returned: Vec<&str> = r.args.iter().filter(|a| a.returned).map(|a| a.name.as_str()).collect();
    let mut s = String::new();
    s.push_str(&format!(
        "\"\"\"The contract of {entry} ({file}): what it must compute, as kidiom checks it.\n\n\
         Written by `kidiom init`; ARGS, INPUTS, INOUTS, OUTPUTS and `tensors` are\n\
         what kidiom read in {file}. Check them, complete what is marked TODO, and\n\
         write `reference` (docs/CONTRACTS.md). This module is trusted: kidiom\n\
         imports it only in the process that makes inputs and judges outputs.\n\"\"\"\n\n\
         import numpy as np\n\n",
        entry = r.entry
    ));
    let what = match &r.launcher {
        Some(l) => format!("{l}'s positional arguments"),
        None => format!("the arguments of {}", r.entry),
    };
    s.push_str(&format!("ARGS = {}  # {what}, in order\n", py_list(&args)));
    s.push_str(&format!("INPUTS = {}  # read only (tensors or scalars)\n", py_list(&of(Role::Input))));
    s.push_str(&format!("INOUTS = {}  # updated in place\n", py_list(&of(Role::InOut))));
    if !r.optional.is_empty() {
        let names: Vec<&str> = r.optional.iter().map(String::as_str).collect();
        s.push_str(&format!("OPTIONAL = {}  # None by default: cases run with and without them\n", py_list(&names)));
    }
    if !r.fixed.is_empty() {
        let names: Vec<&str> = r.fixed.iter().map(String::as_str).collect();
        s.push_str(&format!(
            "FIXED = {}  # mode flags that change what the launcher allocates or aliases: checked at their \
             defaults only (a change behind them is unverified until a case runs it)\n",
            py_list(&names)
        ));
    }
    if returned.is_empty() {
        s.push_str(&format!("OUTPUTS = {}  # written by the call\n\n\n", py_list(&of(Role::Output))));
    } else {
        // the launcher allocates these and returns them: the worker takes them from its return value
        let launcher = r.launcher.as_deref().unwrap_or("it");
        s.push_str(&format!("OUTPUTS = {}  # written by the call\n", py_list(&of(Role::Output))));
        let places: Vec<String> =
            r.return_places.iter().map(|p| p.as_ref().map_or("None".to_string(), |n| format!("\"{n}\""))).collect();
        s.push_str(&format!(
            "RETURNS = [{}]  # allocated and returned by {launcher}, in the order it returns them{}\n\n\n",
            places.join(", "),
            if places.iter().any(|p| p == "None") { " (None: a returned value that is not one)" } else { "" }
        ));
    }
    if !r.reductions.is_empty() {
        // a reduction's element may nearly cancel: its error is judged against the whole output's
        // scale (one slice), not its own
        let axes: Vec<String> = r.reductions.iter().map(|n| format!("\"{n}\": 0")).collect();
        s.push_str(&format!(
            "SLICE_AXES = {{{}}}  # reductions: the worst-slice error over the whole output, not per element\n\n",
            axes.join(", ")
        ));
    }
    // what could not be read, guessed: `kidiom check` runs the contract at odd sizes too, and names
    // these when only the odd sizes fail
    let mut guesses: Vec<(String, String)> = Vec::new();
    for a in &r.args {
        match (&a.tensor, &a.value) {
            (Some(t), _) if t.absent => {}
            (Some(t), _) => {
                if t.guessed {
                    guesses.push((format!("shape of {}", a.name), format!("({})", t.dims.join(", "))));
                }
                if t.index && !t.dtype_read {
                    guesses.push((format!("dtype of {}", a.name), t.dtype.to_string()));
                }
            }
            (None, Some((v, true))) => guesses.push((format!("value of {}", a.name), v.clone())),
            _ => {}
        }
    }
    if r.language == "cuda" {
        let first = r.shape_vars.first().cloned().unwrap_or_else(|| "N".into());
        guesses.push(("launch".into(), format!("grid and block: one thread an element of {first}")));
    }
    if !guesses.is_empty() {
        s.push_str("# What kidiom init guessed (not readable in the source). `kidiom check` also runs the contract\n");
        s.push_str("# at odd sizes, where a wrong guess shows; delete an entry once you have checked it.\n");
        s.push_str("GUESSES = {\n");
        for (k, v) in &guesses {
            s.push_str(&format!("    \"{k}\": \"{}\",\n", v.replace('"', "'")));
        }
        s.push_str("}\n\n\n");
    }
    // tensors(shape)
    s.push_str("def tensors(shape):\n");
    s.push_str("    \"\"\"Every argument at `shape`: tensor -> (dims, numpy dtype name); scalar -> its value.\"\"\"\n");
    let vars = &r.shape_vars;
    if vars.len() == 1 {
        s.push_str(&format!("    {} = shape[\"{}\"]\n", vars[0], vars[0]));
    } else {
        s.push_str(&format!(
            "    {} = {}\n",
            vars.join(", "),
            vars.iter().map(|v| format!("shape[\"{v}\"]")).collect::<Vec<_>>().join(", ")
        ));
    }
    s.push_str("    return {\n");
    for a in &r.args {
        match (&a.tensor, &a.value) {
            (Some(t), _) if t.absent => {
                todo.push(format!("{stem}_contract.py: {}, an index tensor left None (optional)", a.name));
                s.push_str(&format!(
                    "        \"{}\": None,  # TODO: an index tensor (its values address other tensors), left out: \
                     make valid ones in make_inputs and list it in OPTIONAL to check the mode it turns on\n",
                    a.name
                ));
            }
            (Some(t), _) => {
                let dims =
                    if t.dims.len() == 1 { format!("({},)", t.dims[0]) } else { format!("({})", t.dims.join(", ")) };
                let dtype = if t.dtype_read { String::new() } else { format!("; {} assumed", t.dtype) };
                let note = if t.guessed {
                    todo.push(format!("{stem}_contract.py: the shape of {} (TODO, a guess)", a.name));
                    match t.guessed_from {
                        Some(from) => format!("  # TODO: {}'s shape read from {from}{dtype}", a.name),
                        None => format!("  # TODO: {}'s shape is not readable in {file}{dtype}", a.name),
                    }
                } else if dtype.is_empty() {
                    String::new()
                } else {
                    format!("  # {}", &dtype[2..])
                };
                let note = if t.index {
                    todo.push(format!("{stem}_contract.py: valid indices for {} (zeros until then)", a.name));
                    format!("{note}  # TODO: indices (zeros in make_inputs until you make valid ones)")
                } else {
                    note
                };
                s.push_str(&format!("        \"{}\": ({dims}, \"{}\"),{note}\n", a.name, t.dtype));
            }
            (None, Some((v, guessed))) => {
                let note = if *guessed {
                    todo.push(format!("{stem}_contract.py: the value of the scalar {} (TODO)", a.name));
                    format!("  # TODO: {}'s value", a.name)
                } else {
                    String::new()
                };
                s.push_str(&format!("        \"{}\": {v},{note}\n", a.name));
            }
            (None, None) => s.push_str(&format!("        \"{}\": None,  # TODO\n", a.name)),
        }
    }
    s.push_str("    }\n\n\n");
    // make_inputs
    s.push_str(
        "def make_inputs(shape, rng, variant=None):\n\
         \x20   \"\"\"INPUTS and INOUTS at `shape`, drawn from `rng` (a numpy Generator).\"\"\"\n\
         \x20   t = tensors(shape)\n\
         \x20   x = {}\n\
         \x20   for name in INPUTS + INOUTS:\n\
         \x20       if isinstance(t[name], tuple):\n\
         \x20           dims, dtype = t[name]\n\
         \x20           if np.issubdtype(np.dtype(dtype), np.integer):  # indices: zeros address in bounds\n\
         \x20               x[name] = np.zeros(dims, dtype)\n\
         \x20           else:\n\
         \x20               x[name] = rng.standard_normal(dims).astype(dtype)\n\
         \x20       else:\n\
         \x20           x[name] = t[name]\n\
         \x20   return x\n\n\n",
    );
    if r.language == "cuda" {
        s.push_str("def launch(shape):\n");
        s.push_str("    \"\"\"The launch of the __global__ kernel: grid, block and its parameters in order.\"\"\"\n");
        let first = r.shape_vars.first().cloned().unwrap_or_else(|| "N".into());
        let params: Vec<String> = r
            .cuda_params
            .iter()
            .map(|p| match p {
                CudaParam::Arg(n) => format!("\"{n}\""),
                CudaParam::Int(n) => format!("{{\"int\": shape[\"{n}\"]}}"),
            })
            .collect();
        s.push_str(&format!(
            "    # TODO: the grid and block {} is launched with (one thread an element assumed)\n",
            r.entry
        ));
        s.push_str(&format!(
            "    return {{\"grid\": [(shape[\"{first}\"] + 255) // 256, 1, 1], \"block\": [256, 1, 1],\n\
             \x20           \"params\": [{}]}}\n\n\n",
            params.join(", ")
        ));
        todo.push(format!("{stem}_contract.py: launch(shape)'s grid and block (TODO)"));
    }
    let results: Vec<&str> =
        r.args.iter().filter(|a| matches!(a.role, Role::Output | Role::InOut)).map(|a| a.name.as_str()).collect();
    s.push_str("def reference(x):\n");
    s.push_str(&format!(
        "    \"\"\"float64 results from the inputs `x` (never modified): {{{}}}.\"\"\"\n",
        results.iter().map(|n| format!("\"{n}\": ...")).collect::<Vec<_>>().join(", ")
    ));
    s.push_str(&format!(
        "    raise NotImplementedError(\"kidiom init: write the float64 reference of {}: return {{{}}} from x\")\n",
        r.entry,
        results.iter().map(|n| format!("'{n}': ...")).collect::<Vec<_>>().join(", ")
    ));
    todo.push(format!("{stem}_contract.py: reference(x), the float64 results of {}", results.join(", ")));
    (s, todo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_of_a_shape_places_each_name() {
        let at = |s: &str, n| shape_slice(s, n).map(|v| v.into_iter().map(|(_, i)| i).collect::<Vec<_>>());
        assert_eq!(at("g.shape[-2:]", 2), Some(vec![-2, -1]));
        // from the front: a prefix of unknown rank, left unread
        assert_eq!(at("x.shape[:2]", 2), None);
        assert_eq!(at("x.shape[1:3]", 2), Some(vec![1, 2]));
        assert_eq!(at("x.shape[1:]", 3), Some(vec![1, 2, 3]));
        // a length that is not the names', or ends on both sides of the shape: nothing placed
        assert_eq!(at("g.shape[-2:]", 3), None);
        assert_eq!(at("x.shape[1:-1]", 2), None);
        assert_eq!(at("x.shape[0]", 1), None);
    }

    #[test]
    fn shape_indexing_is_read() {
        assert_eq!(shape_index("x.shape[-1]"), Some(("x".into(), -1)));
        assert_eq!(shape_index("x.size(0)"), Some(("x".into(), 0)));
        assert_eq!(shape_index("x.shape"), None);
        assert_eq!(shape_index("f(x).shape[0]"), None);
        assert_eq!(shape_index("len(x)"), Some(("x".into(), 0)));
        assert_eq!(shape_index("len(f(x))"), None);
    }

    /// (tensor, its dims) unpacked, and (tensor, index, name) indexed.
    type Unpacked = (Vec<(String, Vec<String>)>, Vec<(String, i64, String)>);

    fn unpacked(line: &str) -> Unpacked {
        let tree = parse_tree(Lang::Python, line).unwrap().unwrap();
        let mut found = None;
        preorder(tree.root_node(), |n| {
            if n.kind() == "assignment" && found.is_none() {
                found = Some((n.child_by_field_name("left").unwrap(), n.child_by_field_name("right").unwrap()));
            }
            true
        });
        let (l, r) = found.unwrap();
        let mut c = l.walk();
        let names: Vec<String> = l.named_children(&mut c).map(|d| node_text(d, line).to_string()).collect();
        let mut indexed = Vec::new();
        (unpack_shapes(&names, r, line, &mut indexed), indexed)
    }

    #[test]
    fn a_reduction_is_a_stored_sum_at_an_address_without_a_range() {
        let assigned: BTreeMap<String, String> = [
            ("acc", " tl.zeros([B], dtype=tl.float32) acc + x * tl.sigmoid(g)"),
            ("total", " tl.sum(acc, axis=0)"),
            ("cols", " c0 + tl.arange(0, B)"),
            ("ms", " tl.sum(x * x, axis=0) / N"),
            ("y", " x / tl.sqrt(ms + eps) * w"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert!(is_reduction("total * scale / n_cols", &assigned));
        assert!(is_reduction("tl.max(x, axis=1)", &assigned));
        assert!(!is_reduction("tl.maximum(x, 0.0)", &assigned), "elementwise, not a reduction");
        assert!(!is_reduction("x * 2", &assigned));
        // RMSNorm's output comes from a sum too, but is stored through the row's range
        assert!(is_reduction("y", &assigned) && mentions("y_ptr + row * N + cols", &assigned, &["tl.arange("]));
        assert!(!mentions("out_ptr + row", &assigned, &["tl.arange("]));
    }

    #[test]
    fn upstream_shape_unpacking_is_read() {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(unpacked("M, N = x.shape\n").0, vec![("x".into(), v(&["M", "N"]))]);
        // FLA's launchers: the splat takes what the other parts leave
        let (u, i) = unpacked("B, T, H, K, V = *k.shape, v.shape[-1]\n");
        assert_eq!(u, vec![("k".into(), v(&["B", "T", "H", "K"]))]);
        assert_eq!(i, vec![("v".into(), -1, "V".into())]);
        let (u, i) = unpacked("N, D = len(x), w.shape[0]\n");
        assert!(u.is_empty());
        assert_eq!(i, vec![("x".into(), 0, "N".into()), ("w".into(), 0, "D".into())]);
        // two splats, or more parts than names: nothing is guessed
        assert!(unpacked("A, B, C = *x.shape, *y.shape\n").0.is_empty());
        assert!(unpacked("A, B = x.shape[0], y.shape[0], z.shape[0]\n").1.is_empty());
    }
}
