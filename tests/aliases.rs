//! Aliases, counted and rewritten: a corpus that reaches Triton functions
//! through its own helper module (`from .op import exp2`, where `op.py`
//! binds `exp2 = tl.math.exp2` in one branch of an `if`), through
//! `tl.math.exp2`, and through `import triton.language as T`, counted
//! against a hand count; another DSL's `exp2` is not Triton's. Rewrites
//! match the file's own spelling of `tl`.

use crate::util::Env;

const OP: &str = "import os\nimport triton.language as tl\nimport triton.language.extra.libdevice as tldevice\n\nif os.environ.get('FAST', '0') == '1':\n    exp = tldevice.fast_expf\n    exp2 = tldevice.exp2\nelse:\n    exp = tl.exp\n    exp2 = tl.math.exp2\n";

const KERNELS: &str = r#"import triton
import triton.language as tl
import triton.language as T
import other_dsl.language as U
from .op import exp, exp2


@triton.jit
def a(x, o, B: tl.constexpr):
    v = tl.load(x + tl.arange(0, B))
    w = exp2(v) + exp2(v * 2) + tl.math.exp2(v) + T.exp2(v) + tl.exp2(v)
    y = exp(w) + tl.exp(w) + T.exp(w)
    tl.store(o + tl.arange(0, B), y)


def host_only(v):
    return U.exp2(v) + exp2(v)
"#;

#[test]
fn aliases_count_as_the_triton_function_and_match_the_files_spelling() {
    let env = Env::new();
    env.write("up/pkg/op.py", OP);
    env.write("up/pkg/kern.py", KERNELS);
    env.write("up/pkg/kern2.py", KERNELS.replace("def a(", "def a2("));
    let db = env.db();
    let db = db.to_str().expect("utf8");
    let mined = env.json(&["mine", "up", "--name", "up", "--db", db, "--json"]);
    let aliases = &mined["corpora"][0]["call_aliases"];
    assert_eq!(aliases["exp2 -> tl.exp2"], 4, "{mined:#}");
    assert_eq!(aliases["exp -> tl.exp"], 2, "{mined:#}");
    let p = env.json(&["catalog", "show", "py-variant-exp-exp2", "--db", db, "--json"]);
    // by hand, per kernel: exp2 x2 (helper), tl.math.exp2, T.exp2, tl.exp2 = 5; exp x3 (helper, tl, T)
    assert_eq!(p["support"][0]["occurrences"], 10, "{p:#}");
    assert_eq!(p["support"][0]["opportunities"], 6, "{p:#}");
    let values: Vec<&str> =
        p["values"].as_array().expect("values").iter().filter_map(|v| v["value"].as_str()).collect();
    assert_eq!(values, ["tl.exp2"], "one function, one name: {p:#}");

    // rewriting keeps the file's spelling
    env.write(
        "kernels/k.py",
        "import triton\nimport triton.language as T\n\n\n@triton.jit\ndef k(x, o, B: T.constexpr):\n    v = T.load(x + T.arange(0, B))\n    T.store(o + T.arange(0, B), T.exp(v) + T.math.exp(v))\n",
    );
    let out = env.json(&["apply", "kernels/k.py", "--pattern", "py-variant-exp-exp2", "--db", db, "--json"]);
    let diff = out["candidates"][0]["diff"].as_str().expect("diff");
    assert!(
        diff.contains(
            "+    T.store(o + T.arange(0, B), T.exp2(v * 1.4426950408889634) + T.math.exp2(v * 1.4426950408889634))"
        ),
        "{diff}"
    );
}
