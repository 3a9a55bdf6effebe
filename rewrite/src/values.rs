//! Hole values a rewrite may write: which values can be written at any
//! site, and which one a histogram supports. The miner decides with the same
//! functions whether a usage idiom gets a rewrite, so the two never disagree.

use std::collections::BTreeMap;

use kidiom_syntax::Lang;

/// Whether a hole value can be written at any site: a literal, or a name
/// from Triton's language module. Names local to the upstream file
/// (`DOT_PRECISION`) cannot.
pub fn writable_value(lang: Lang, v: &str) -> bool {
    let v = v.trim();
    if v.is_empty() || v.contains('\n') {
        return false;
    }
    let quoted = |q: char| v.len() >= 2 && v.starts_with(q) && v.ends_with(q) && !v[1..v.len() - 1].contains(q);
    let numeric = v.chars().all(|c| c.is_ascii_digit() || c == '.') && v.chars().any(|c| c.is_ascii_digit());
    match lang {
        Lang::Python => {
            quoted('"')
                || quoted('\'')
                || numeric
                || matches!(v, "True" | "False" | "None")
                || (v.starts_with("tl.") && v[3..].chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        }
        Lang::Cuda | Lang::Cpp => numeric,
        Lang::Rust => false,
    }
}

/// The value a histogram supports most ([`supported_value`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supported {
    /// The value, writable at any site.
    pub value: String,
    /// Sites whose value is it, or a name that can hold it.
    pub sites: u64,
    /// All sites of the histogram.
    pub total: u64,
}

/// The writable value ([`writable_value`]) that most sites of a histogram
/// hold, from its bars (value, sites, the literals a name resolves to): a
/// bar supports its value when that is writable, else each writable
/// literal its name can hold. Ties go to the bar seen first.
pub fn supported_value<'a>(
    lang: Lang,
    bars: impl IntoIterator<Item = (&'a str, u64, &'a [String])>,
) -> Option<Supported> {
    let mut order: Vec<&str> = Vec::new();
    let mut sites: BTreeMap<&str, u64> = BTreeMap::new();
    let mut total = 0;
    for (v, n, literals) in bars {
        total += n;
        let held: Vec<&str> = if writable_value(lang, v) {
            vec![v]
        } else {
            let mut ls: Vec<&str> = literals.iter().map(String::as_str).filter(|l| writable_value(lang, l)).collect();
            ls.dedup();
            ls
        };
        for h in held {
            if !sites.contains_key(h) {
                order.push(h);
            }
            *sites.entry(h).or_default() += n;
        }
    }
    let best = order.iter().copied().max_by(|a, b| {
        sites[a].cmp(&sites[b]).then_with(|| {
            // earlier first on a tie: `max_by` keeps the last maximum
            let pos = |x: &str| order.iter().position(|o| *o == x);
            pos(b).cmp(&pos(a))
        })
    })?;
    Some(Supported { value: best.to_string(), sites: sites[best], total })
}
