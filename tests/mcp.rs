use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use serde_json::{Value, json};

use crate::util::{Env, git_repo};

const KERNEL: &str = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(a, b, o, BT: tl.constexpr):\n    i = tl.program_id(0)\n    x = tl.load(a + i)\n    y = tl.load(b + i)\n    tl.store(o + i, tl.dot(x, y))\n";

/// A workspace: a git repository holding kernels/k.py, and a catalog mined
/// from a small corpus where `tl.dot` carries `input_precision`.
fn workspace() -> (Env, String) {
    let env = Env::new();
    git_repo(&env.path().join("ws"), &[("kernels/k.py", KERNEL.as_bytes())]);
    let corpus = "import triton\nimport triton.language as tl\n@triton.jit\ndef c(a):\n    x = tl.dot(a, a, input_precision=\"ieee\")\n    y = tl.dot(a, a)\n";
    for i in 0..3 {
        env.write(&format!("corpus/c{i}.py"), corpus);
    }
    let db = env.path().join("catalog.sqlite").to_string_lossy().into_owned();
    env.json(&["mine", "corpus", "--db", &db, "--json"]);
    (env, db)
}

struct Session {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
    /// Notifications received while waiting for responses.
    notifications: Vec<Value>,
}

impl Session {
    fn start(env: &Env, db: &str, flags: &[&str]) -> Session {
        let mut cmd = env.cmd();
        cmd.arg("mcp").arg("--root").arg(env.path().join("ws")).arg("--db").arg(db).args(flags);
        let mut child =
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawn");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut s = Session { child, stdin, stdout, next: 1, notifications: Vec::new() };
        let init = s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "kidiom-test", "version": "0"}}),
        );
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
        assert_eq!(init["result"]["serverInfo"]["name"], "kidiom");
        assert!(init["result"]["capabilities"]["tools"].is_object());
        s.send_line(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
        s
    }

    fn send_line(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write");
        self.stdin.flush().expect("flush");
    }

    /// Reads messages until the response with `id`.
    fn response(&mut self, id: &Value) -> Value {
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read");
            assert!(n > 0, "server closed its stdout");
            let v: Value = serde_json::from_str(&line).expect("server sends JSON lines");
            assert_eq!(v["jsonrpc"], "2.0");
            if v.get("method").is_some() {
                self.notifications.push(v);
            } else if &v["id"] == id {
                return v;
            }
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next);
        self.next += 1;
        self.send_line(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string());
        self.response(&id)
    }

    /// A tools/call; returns the result object.
    fn call(&mut self, name: &str, args: Value) -> Value {
        let r = self.request("tools/call", json!({"name": name, "arguments": args}));
        assert!(r.get("error").is_none(), "{name}: protocol error {r}");
        r["result"].clone()
    }

    fn ok(&mut self, name: &str, args: Value) -> Value {
        let r = self.call(name, args);
        assert_eq!(r["isError"], false, "{name}: {r}");
        assert!(r["content"][0]["text"].is_string());
        r["structuredContent"].clone()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_client_session_over_stdio() {
    let (env, db) = workspace();
    let kernel_path = env.path().join("ws/kernels/k.py");
    let mut s = Session::start(&env, &db, &[]);

    let tools = s.request("tools/list", json!({}));
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    for want in [
        "search_patterns",
        "get_pattern",
        "list_targets",
        "list_candidates",
        "get_evidence",
        "propose_rewrite",
        "validate_candidate",
        "apply_rewrite",
        "accept_candidate",
        "validate_patch",
        "init_contract",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    for t in tools["result"]["tools"].as_array().expect("tools") {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        // the hints are truthful: only tools that change nothing are read-only
        let name = t["name"].as_str().expect("name");
        let read_only = ["search_patterns", "get_pattern", "list_targets", "list_candidates", "get_evidence"];
        assert_eq!(t["annotations"]["readOnlyHint"], read_only.contains(&name), "{t}");
        assert_eq!(t["annotations"]["openWorldHint"], false, "{t}");
    }
    let tool = |name: &str| {
        tools["result"]["tools"].as_array().and_then(|a| a.iter().find(|t| t["name"] == name)).cloned().expect("tool")
    };
    for name in ["propose_rewrite", "validate_candidate", "validate_patch"] {
        let t = tool(name);
        assert_eq!(t["annotations"]["destructiveHint"], false, "{t}");
        assert!(t["description"].as_str().expect("description").contains("catalog"), "{t}");
    }
    assert_eq!(tool("propose_rewrite")["annotations"]["idempotentHint"], true);
    assert_eq!(tool("validate_candidate")["annotations"]["idempotentHint"], false);
    assert!(tool("validate_patch")["description"].as_str().expect("description").contains("--allow-exec"));

    let found = s.ok("search_patterns", json!({"query": "input_precision", "language": "python"}));
    let id = "py-keyword-tl-dot-input-precision";
    assert!(found["patterns"].as_array().expect("patterns").iter().any(|p| p["id"] == id), "{found}");
    let p = s.ok("get_pattern", json!({"id": id}));
    assert_eq!(p["values"][0]["value"], "\"ieee\"");
    assert_eq!(s.call("get_pattern", json!({"id": "no-such"}))["isError"], true);

    let targets = s.ok("list_targets", json!({}));
    assert_eq!(targets["targets"][0]["path"], "kernels/k.py");
    assert_eq!(targets["targets"][0]["kernels"], 1);
    let outside = s.call("list_targets", json!({"path": "../corpus"}));
    assert_eq!(outside["isError"], true);
    assert!(outside["content"][0]["text"].as_str().expect("text").contains("outside the workspace"));

    let proposed = s.ok("propose_rewrite", json!({"pattern_ids": [id]}));
    let cand = &proposed["candidates"][0];
    assert!(
        cand["diff"].as_str().expect("diff").contains("+    tl.store(o + i, tl.dot(x, y, input_precision=\"ieee\"))"),
        "{cand}"
    );
    let cand_id = cand["id"].as_str().expect("id").to_string();
    assert_eq!(std::fs::read_to_string(&kernel_path).expect("read"), KERNEL, "a dry run writes nothing");
    let listed = s.ok("list_candidates", json!({"status": "proposed"}));
    assert_eq!(listed["candidates"][0]["id"], cand_id.as_str());
    let ev = s.ok("get_evidence", json!({"id": cand_id}));
    assert_eq!(ev["pattern_id"], id);

    // Validation reports progress notifications before its answer.
    let r = s.request(
        "tools/call",
        json!({"name": "validate_candidate", "arguments": {"ids": [cand_id], "device": "cpu", "timeout_seconds": 60}, "_meta": {"progressToken": "v1"}}),
    );
    assert!(r["result"].is_object(), "{r}");
    let progress: Vec<&Value> = s
        .notifications
        .iter()
        .filter(|n| n["method"] == "notifications/progress" && n["params"]["progressToken"] == "v1")
        .collect();
    assert!(progress.len() >= 2, "{:?}", s.notifications);
    let text = r["result"]["content"][0]["text"].as_str().expect("text");
    if r["result"]["isError"] == false {
        assert!(r["result"]["structuredContent"]["candidates"][0]["verdict"].is_object(), "{r}");
    } else {
        assert!(!text.is_empty());
    }

    // A read-only server refuses writes, and nothing changes on disk.
    for (tool, args) in [("apply_rewrite", json!({"pattern_ids": [id]})), ("accept_candidate", json!({"id": cand_id}))]
    {
        let refused = s.call(tool, args);
        assert_eq!(refused["isError"], true, "{tool}");
        assert!(refused["content"][0]["text"].as_str().expect("text").contains("--allow-write"), "{refused}");
    }
    // validate_patch runs the patch's code: refused without --allow-exec
    let refused = s.call("validate_patch", json!({"patch": broken_patch()}));
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(refused["content"][0]["text"].as_str().expect("text").contains("--allow-exec"), "{refused}");
    assert_eq!(std::fs::read_to_string(&kernel_path).expect("read"), KERNEL);
    let repo = git2::Repository::open(env.path().join("ws")).expect("repo");
    assert!(repo.find_branch("kidiom/review", git2::BranchType::Local).is_err());

    // Protocol errors: the server answers and keeps serving.
    s.send_line("this is not json");
    let parse = s.response(&Value::Null);
    assert_eq!(parse["error"]["code"], -32700);
    assert_eq!(s.request("tools/call", json!({"name": "no_such_tool", "arguments": {}}))["error"]["code"], -32602);
    assert_eq!(s.request("tools/call", json!({"name": "get_pattern", "arguments": {}}))["error"]["code"], -32602);
    assert_eq!(
        s.request("tools/call", json!({"name": "get_pattern", "arguments": {"id": 3}}))["error"]["code"],
        -32602
    );
    assert_eq!(s.request("no/such/method", json!({}))["error"]["code"], -32601);
    let stats = s.request("resources/read", json!({"uri": "kidiom://catalog/stats"}));
    let text = stats["result"]["contents"][0]["text"].as_str().expect("stats text");
    assert!(serde_json::from_str::<Value>(text).expect("stats JSON")["patterns"].is_number(), "{text}");
    assert_eq!(s.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_write_server_accepts_onto_the_review_branch() {
    let (env, db) = workspace();
    let mut s = Session::start(&env, &db, &["--allow-write"]);
    let proposed = s.ok("propose_rewrite", json!({"pattern_ids": ["py-keyword-tl-dot-input-precision"]}));
    let cand_id = proposed["candidates"][0]["id"].as_str().expect("id").to_string();
    // never validated: refused with the reason, unless forced
    let refused = s.call("accept_candidate", json!({"id": cand_id}));
    assert_eq!(refused["isError"], true, "{refused}");
    let text = refused["content"][0]["text"].as_str().expect("text");
    assert!(text.contains("is not validated") && text.contains("force"), "{text}");
    // --allow-write does not enable validate_patch
    let refused = s.call("validate_patch", json!({"patch": broken_patch()}));
    assert!(refused["content"][0]["text"].as_str().expect("text").contains("--allow-exec"), "{refused}");
    let accepted = s.ok("accept_candidate", json!({"id": cand_id, "force": true}));
    let repo = git2::Repository::open(env.path().join("ws")).expect("repo");
    let branch = repo.find_branch("kidiom/review", git2::BranchType::Local).expect("review branch");
    let commit = branch.get().peel_to_commit().expect("commit");
    assert_eq!(commit.id().to_string(), accepted["commit"].as_str().expect("commit id"));
    assert!(commit.message().expect("message").contains("Kidiom-Pattern: py-keyword-tl-dot-input-precision"));
    // The working tree is left alone; the rewrite lives on the branch.
    assert_eq!(std::fs::read_to_string(env.path().join("ws/kernels/k.py")).expect("read"), KERNEL);
}

/// A patch that breaks the parse of kernels/k.py: the syntax gate rejects it
/// before any harness runs, so validating it is fast.
fn broken_patch() -> String {
    let broken = KERNEL.replace("tl.store(o + i, tl.dot(x, y))", "tl.store(o + i, tl.dot(x, y)");
    format!(
        "diff --git a/kernels/k.py b/kernels/k.py\nindex 0000000..1111111 100644\n{}",
        kidiom_rewriter::unified("kernels/k.py", KERNEL, &broken, 3)
            .split_once('\n')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default()
    )
}

#[test]
fn an_exec_server_validates_an_agents_own_patch() {
    let (env, db) = workspace();
    let mut s = Session::start(&env, &db, &["--allow-exec"]);
    let r = s.ok("validate_patch", json!({"patch": broken_patch(), "device": "cpu", "timeout_seconds": 60}));
    let ev = &r["candidates"][0];
    assert_eq!(ev["pattern"], "manual", "{r}");
    assert_eq!(ev["verdict"]["kind"], "rejected", "{r}");
    assert_eq!(ev["verdict"]["gate"], "syntax", "{r}");
    let id = ev["candidate"].as_str().expect("id").to_string();
    assert!(id.starts_with("manual@kernels/k.py#"), "{id}");
    // stored with its evidence, like any candidate
    let stored = s.ok("get_evidence", json!({"id": id}));
    assert_eq!(stored["pattern_id"], "manual");
    assert_eq!(stored["status"], "rejected");
    assert_eq!(stored["evidence"]["verdict"]["gate"], "syntax");
    // a bad category is a protocol error; a patch that does not apply is a tool error
    assert_eq!(
        s.request("tools/call", json!({"name": "validate_patch", "arguments": {"patch": "x", "category": "nope"}}))["error"]
            ["code"],
        -32602
    );
    let stale =
        s.call("validate_patch", json!({"patch": kidiom_rewriter::unified("kernels/k.py", "other\n", "x\n", 3)}));
    assert_eq!(stale["isError"], true, "{stale}");
    // the workspace is untouched; --allow-exec does not enable writes
    assert_eq!(std::fs::read_to_string(env.path().join("ws/kernels/k.py")).expect("read"), KERNEL);
    let refused = s.call("apply_rewrite", json!({"pattern_ids": ["py-keyword-tl-dot-input-precision"]}));
    assert!(refused["content"][0]["text"].as_str().expect("text").contains("--allow-write"), "{refused}");
}

/// A workspace of the user's own: no kernels/, a Triton kernel under ops/
/// that kidiom.toml's `[run] targets` names, and a catalog mined from a
/// corpus whose launches pass `num_warps=8`.
fn own_workspace() -> (Env, String) {
    let env = Env::new();
    git_repo(
        &env.path().join("ws"),
        &[("ops/rmsnorm.py", crate::init::RMSNORM.as_bytes()), ("kidiom.toml", b"[run]\ntargets = [\"ops\"]\n")],
    );
    for i in 0..3 {
        let corpus = format!(
            "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k{i}(x, n, B: tl.constexpr):\n    tl.store(x + tl.arange(0, B), 1.0)\n\n\ndef big{i}(x):\n    k{i}[(1,)](x, x.numel(), B=1024, num_warps=8)\n\n\ndef small{i}(x):\n    k{i}[(1,)](x, x.numel(), B=128)\n"
        );
        env.write(&format!("corpus/c{i}.py"), corpus);
    }
    let db = env.path().join("catalog.sqlite").to_string_lossy().into_owned();
    env.json(&["mine", "corpus", "--db", &db, "--json"]);
    (env, db)
}

#[test]
fn init_and_the_rewrite_tools_work_on_the_targets_kidiom_toml_names() {
    let (env, db) = own_workspace();
    let ws = env.path().join("ws");
    let mut s = Session::start(&env, &db, &[]);
    // init writes files: refused by a read-only server, nothing written
    let refused = s.call("init_contract", json!({"path": "ops/rmsnorm.py"}));
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(refused["content"][0]["text"].as_str().expect("text").contains("--allow-write"), "{refused}");
    assert!(!ws.join("ops/rmsnorm.toml").exists());
    // the read and proposing tools look where kidiom.toml says, not in kernels/
    let targets = s.ok("list_targets", json!({}));
    assert_eq!(targets["targets"][0]["path"], "ops/rmsnorm.py", "{targets}");
    let proposed = s.ok("propose_rewrite", json!({"pattern_ids": ["py-keyword-kernel-grid-num-warps"]}));
    let cands = proposed["candidates"].as_array().expect("candidates");
    assert_eq!(cands.len(), 1, "{proposed}");
    assert_eq!(cands[0]["path"], "ops/rmsnorm.py");
    assert!(cands[0]["diff"].as_str().expect("diff").contains("num_warps=8"), "{proposed}");
    drop(s);

    let mut s = Session::start(&env, &db, &["--allow-write", "--allow-exec"]);
    let r = s.ok("init_contract", json!({"path": "ops/rmsnorm.py"}));
    assert_eq!(
        (r["manifest"].as_str(), r["contract"].as_str()),
        (Some("ops/rmsnorm.toml"), Some("ops/rmsnorm_contract.py"))
    );
    assert_eq!(r["entry"], "rmsnorm_kernel");
    assert!(r["todo"].to_string().contains("reference(x)"), "{r}");
    let manifest = std::fs::read_to_string(ws.join("ops/rmsnorm.toml")).expect("manifest written");
    assert!(manifest.contains("entry = \"rmsnorm_kernel\""), "{manifest}");
    assert!(ws.join("ops/rmsnorm_contract.py").is_file());
    // validation knows the new contract: an edit that loosens it is rejected (before any kernel runs)
    let looser = manifest.replace("rel_l2 = 1e-5", "rel_l2 = 1.0");
    let patch = kidiom_rewriter::unified("ops/rmsnorm.toml", &manifest, &looser, 1);
    let v = s.ok("validate_patch", json!({"patch": patch, "device": "cpu", "timeout_seconds": 60}));
    let verdict = &v["candidates"][0]["verdict"];
    assert_eq!((verdict["kind"].as_str(), verdict["gate"].as_str()), (Some("rejected"), Some("static")), "{v}");
    assert!(verdict["reason"].as_str().unwrap_or("").contains("frozen contract: ops/rmsnorm.toml"), "{v}");
    // never over the user's files unless forced, never outside the workspace
    std::fs::write(ws.join("ops/rmsnorm_contract.py"), "# mine\n").expect("write");
    let again = s.call("init_contract", json!({"path": "ops/rmsnorm.py"}));
    assert_eq!(again["isError"], true, "{again}");
    assert!(again["content"][0]["text"].as_str().expect("text").contains("--force"), "{again}");
    assert_eq!(std::fs::read_to_string(ws.join("ops/rmsnorm_contract.py")).expect("read"), "# mine\n");
    s.ok("init_contract", json!({"path": "ops/rmsnorm.py", "force": true}));
    assert!(std::fs::read_to_string(ws.join("ops/rmsnorm_contract.py")).expect("read").contains("ARGS"));
    env.write("elsewhere.py", crate::init::RMSNORM);
    let outside = s.call("init_contract", json!({"path": "../elsewhere.py"}));
    assert!(outside["content"][0]["text"].as_str().expect("text").contains("outside the workspace"), "{outside}");
    assert!(!env.path().join("elsewhere.toml").exists());
}

/// The same session from an independent client: the `mcp` Python SDK.
#[test]
fn the_python_sdk_client_speaks_to_the_server() {
    let venv = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv/bin/python");
    let has_sdk = std::process::Command::new(venv)
        .args(["-c", "import mcp.client.stdio"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_sdk {
        let required = std::env::var_os("CI").is_some() || std::env::var_os("KIDIOM_REQUIRE_MCP_SDK").is_some();
        assert!(!required, "the mcp Python SDK is not installed in .venv (scripts/setup-python.sh installs it)");
        eprintln!("skipping: the mcp Python SDK is not installed in .venv (run scripts/setup-python.sh)");
        return;
    }
    let (env, db) = workspace();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client.py");
    let out = std::process::Command::new(venv)
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_kidiom"))
        .arg(env.path().join("ws"))
        .arg(&db)
        .env("KIDIOM_CACHE", env.path().join("cache"))
        .env("KIDIOM_CONTENT_CACHE", crate::util::content_cache())
        .output()
        .expect("run the client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("transcript ok"), "{stdout}");
}
