//! End-to-end tests of the `kidiom` binary. One module per command; each
//! test builds its own corpus in a temporary directory (no upstream code).

#[macro_use]
mod util;
// A copy of kernels/ to validate in, planted candidates, readers of the evidence.
mod project;

// The data flow of ARCHITECTURE pinned: crate dependencies, module layers, libraries that do not print.
mod architecture;
// The README's examples run (each `$ kidiom` line, its table headers), the set-up commands CI's, every docs link resolving.
mod readme;
// Every library error variant: one line, each cause once.
mod errors;
// The terminal output of the commands as users read it: insta snapshots.
mod terminal;
// `kidiom mine`: counts against an independent count, bad input, incrementality, locking.
mod mine;
// Aliases (a corpus's helper module, `tl.math`, `import triton.language as T`): counted and rewritten.
mod aliases;
// `kidiom catalog list|show|search|stats`.
mod catalog;
// Candidates stored by an earlier kidiom: read through the typed record, reviewed as before.
mod record;
// `kidiom apply|review|accept` and `catalog export`: golden diffs, properties, bad input, ast-grep.
mod apply;
// `kidiom catalog export --format json|import`: round trip, snapshot, `run` filling in an unreachable corpus.
mod exchange;
// `kidiom mine --history`: planted edits, noise, safety, bad input, resumption.
mod history;
// `kidiom apply --search`: per-site precision search on our prefill kernel, memory hints by role.
mod search;
// Redundant work removed: the built-in loop reuse on a CUDA decode of our own, a wrong reuse rejected.
mod redundancy;
// `kidiom run`: the short summary (its line budget, one line per corpus, the GPU command, the review) and -v.
mod run;
// `kidiom validate`: the gates on a copy of our kernels (CPU), planted bugs, a hanging kernel.
mod validate;
// Launch configuration: launch options mined upstream rewrite our decode's launch; the static gate's launch rule.
mod launch;
// The Ray executor: the same verdicts through a local Ray head as locally, node evidence, a deadline.
mod ray;
// The GIL idiom: mined, refused where unsafe, accepted on our KV-transfer module by the CPU speed gate.
mod gil;
// Planted cheats through `kidiom validate`, each rejected at its gate with the reason.
mod cheats;
// Trust, round four: the host speed gate cannot be bought (a process per window, the service's requests/s).
mod service;
// `kidiom profile` and the predicted speedup every validation records.
mod profile;
// `kidiom predict --check`: the device model against published measurements.
mod predict;
// Trust, round two: candidates that try to escape the sandbox or to win on a CPU, each blocked and rejected.
mod trust;
// `kidiom review --html`: the site in headless Chromium, links, plots, escaping; `run --html`, `--open`.
mod html;
// `kidiom init`: the manifest and contract skeleton of a Triton or CUDA kernel, and its errors.
mod init;
// docs/OWN-KERNEL.md ("Validate your own kernel"), followed literally in a tree with no kernels/ and no harness.
mod own_kernel;
// Issue #26 end to end on three kernels of our own: init, a mined catalog applied, the gates, a wrong and a lower-precision rewrite rejected, the review site.
mod own_kernels;
// Issue #43: a folder of our own from init to a checked contract (odd sizes, guesses), contract mistakes the contract's, stale verdicts judged again.
mod contract_check;
// Issue #48: a kernel written the upstream way (torch launcher, autotune, heuristics, an autograd Function) from init to needs-gpu.
mod upstream;
// State precision (issue #27): the precision idioms, `validate --kernel VARIANT` through the precision gate, the reviews side by side.
mod precision;
// `kidiom mcp`: a client session over stdio, write refusal, the Python SDK as an independent client.
mod mcp;
