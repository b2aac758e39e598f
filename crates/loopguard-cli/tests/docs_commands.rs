//! Every command the documents tell a user to type, run as written: the shell blocks of
//! README.md, docs/*.md and the packages' READMEs.
//!
//! Each fenced shell block (`sh`, `bash`, `shell`, `console`) carries a marker, an HTML
//! comment on the line before it (GitHub does not show it), that says what CI does with it:
//!
//! - `<!-- doc-test: run [NAME] [checkout] [serves] [heavy] -->`: run here, as written, by
//!   bash. The blocks of one scenario `NAME` (by default each block is its own) run in
//!   document order in one sandbox, as in one terminal: a fresh `HOME`, the `loopguard`
//!   and `loopguard-hook` binaries of this build on the `PATH` (copied out of the build
//!   directory, as installed), none of the tests' `LOOPGUARD_*` variables, and a new empty
//!   directory as the working directory (`checkout`: the repository's root, for commands
//!   that name its files). What one block exports or `cd`s into, the next one sees. A
//!   block fails when any of its commands does. `serves`: the block ends by starting a
//!   server, which keeps running (as in another terminal) until its scenario ends; it is
//!   ready when it prints `listening on http://`. `heavy`: it builds in release mode or
//!   installs from a registry, minutes of work, so it runs in CI (`CI` set) or with
//!   `LOOPGUARD_TEST_DOCS=1`. Lines of the form `$ COMMAND` followed by output are a
//!   transcript: each command is run and must print exactly the output shown.
//! - `<!-- doc-test: output -->` before a `text` block: what the run block before it must
//!   print on stdout, exactly.
//! - `<!-- doc-test: by PATH -->`: run as written by that test file, which reads the block
//!   from this document.
//! - `<!-- doc-test: not run: REASON; equivalent: PATH -->`: cannot run in CI (a Docker
//!   daemon, a remote Redis, the user's own files, a benchmark); PATH is the test (or
//!   script) that runs its equivalent.
//!
//! `python` and `js` blocks may carry `run` markers too; a `python` block runs with the
//! `python3` of its scenario (the virtualenv a block before it activated). After every
//! block, `git status` must be what it was: a documented command leaves the checkout as
//! it was.

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::repo_root;
use serde_json::Value;

/// What CI does with a block.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Marker {
    Run {
        scenario: Option<String>,
        checkout: bool,
        serves: bool,
        heavy: bool,
    },
    Output,
    By(String),
    NotRun {
        reason: String,
        equivalent: String,
    },
}

/// One fenced block of a document.
#[derive(Clone, Debug)]
struct Block {
    /// The document, relative to the repository root.
    file: String,
    /// The line of its opening fence (1-based).
    line: usize,
    lang: String,
    text: String,
    marker: Option<Marker>,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }

    fn is_shell(&self) -> bool {
        matches!(self.lang.as_str(), "sh" | "bash" | "shell" | "console")
    }
}

const MARKER_PREFIX: &str = "<!-- doc-test:";

/// The documents whose commands users are told to type.
fn documents() -> Vec<String> {
    let root = repo_root();
    let mut files = vec![
        "README.md".to_owned(),
        "packages/node/README.md".to_owned(),
        "packages/openclaw-plugin/README.md".to_owned(),
        "crates/loopguard-python/README.md".to_owned(),
    ];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

fn parse_marker(comment: &str) -> Result<Marker, String> {
    let body = comment
        .strip_prefix(MARKER_PREFIX)
        .and_then(|rest| rest.strip_suffix("-->"))
        .ok_or_else(|| format!("not a marker: {comment}"))?
        .trim();
    if let Some(rest) = body.strip_prefix("not run:") {
        let (reason, equivalent) = rest
            .split_once("; equivalent:")
            .ok_or_else(|| format!("`not run: REASON; equivalent: PATH` expected: {comment}"))?;
        return Ok(Marker::NotRun {
            reason: reason.trim().to_owned(),
            equivalent: equivalent.trim().to_owned(),
        });
    }
    if let Some(path) = body.strip_prefix("by ") {
        return Ok(Marker::By(path.trim().to_owned()));
    }
    if body == "output" {
        return Ok(Marker::Output);
    }
    let mut words = body.split_whitespace();
    if words.next() != Some("run") {
        return Err(format!("unknown marker: {comment}"));
    }
    let (mut scenario, mut checkout, mut serves, mut heavy) = (None, false, false, false);
    for word in words {
        match word {
            "checkout" => checkout = true,
            "serves" => serves = true,
            "heavy" => heavy = true,
            name if scenario.is_none() => scenario = Some(name.to_owned()),
            other => return Err(format!("unknown word {other:?} in {comment}")),
        }
    }
    Ok(Marker::Run {
        scenario,
        checkout,
        serves,
        heavy,
    })
}

/// Every fenced block of `file`, with its marker.
fn blocks_of(file: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo_root().join(file)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].starts_with("```") {
            body.push(lines[i]);
            i += 1;
        }
        i += 1;
        let marker = start
            .checked_sub(1)
            .map(|j| lines[j].trim())
            .filter(|l| l.starts_with(MARKER_PREFIX))
            .map(|l| parse_marker(l).unwrap_or_else(|e| panic!("{file}:{}: {e}", start)));
        out.push(Block {
            file: file.to_owned(),
            line: start + 1,
            lang: lang.trim().to_owned(),
            text: body.join("\n"),
            marker,
        });
    }
    out
}

fn all_blocks() -> Vec<Block> {
    documents().iter().flat_map(|f| blocks_of(f)).collect()
}

/// Every shell block says what CI does with it, and what a marker points at exists.
#[test]
fn every_shell_block_is_run_or_says_why_not() {
    let root = repo_root();
    let mut problems = Vec::new();
    let blocks = all_blocks();
    for (i, block) in blocks.iter().enumerate() {
        match &block.marker {
            None if block.is_shell() => problems.push(format!(
                "{}: a shell block without a `{MARKER_PREFIX} … -->` marker",
                block.at()
            )),
            None => {}
            Some(Marker::Run { .. })
                if !block.is_shell() && !matches!(block.lang.as_str(), "python" | "js") =>
            {
                problems.push(format!("{}: cannot run a {} block", block.at(), block.lang));
            }
            Some(Marker::Run { .. }) => {}
            Some(Marker::Output) => {
                let previous = i
                    .checked_sub(1)
                    .map(|j| &blocks[j])
                    .filter(|b| b.file == block.file);
                if !matches!(
                    previous.and_then(|b| b.marker.as_ref()),
                    Some(Marker::Run { .. })
                ) {
                    problems.push(format!(
                        "{}: an output block must follow a run block",
                        block.at()
                    ));
                }
            }
            Some(Marker::By(path)) => match std::fs::read_to_string(root.join(path)) {
                Ok(test) if test.contains(&block.file) => {}
                Ok(_) => problems.push(format!(
                    "{}: {path} does not read {}",
                    block.at(),
                    block.file
                )),
                Err(e) => problems.push(format!("{}: {path}: {e}", block.at())),
            },
            Some(Marker::NotRun { reason, equivalent }) => {
                if reason.is_empty() {
                    problems.push(format!("{}: say why it is not run", block.at()));
                }
                if !root.join(equivalent).exists() {
                    problems.push(format!("{}: no such file {equivalent}", block.at()));
                }
            }
        }
    }
    // Each scenario has one working directory and one weight.
    let mut scenarios: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    for block in &blocks {
        if let Some(Marker::Run {
            scenario: Some(name),
            checkout,
            heavy,
            ..
        }) = &block.marker
        {
            let seen = scenarios.entry(name.clone()).or_insert((*checkout, *heavy));
            if seen.1 != *heavy {
                problems.push(format!(
                    "{}: scenario {name} is heavy in some blocks only",
                    block.at()
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The routes the README and the install docs promise are run, not waved through.
    for (file, needle) in [
        ("README.md", "cargo run --release -p loopguard-cli -- serve"),
        (
            "README.md",
            "cargo run --release -p loopguard-cli -- replay",
        ),
        ("docs/python.md", "pip install ./crates/loopguard-python"),
        ("docs/node.md", "scripts/npm-pack"),
        ("docs/mcp-proxy.md", "| loopguard mcp-proxy"),
    ] {
        assert!(
            blocks.iter().any(|b| b.file == file
                && b.text.contains(needle)
                && matches!(b.marker, Some(Marker::Run { .. }))),
            "{file}: no block that runs {needle:?}"
        );
    }
}

/// Whether the blocks that build in release mode or install from a registry run.
fn heavy_allowed() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("LOOPGUARD_TEST_DOCS").is_some()
}

/// Heavy scenarios run one at a time: their release builds would wait for each other on
/// Cargo's lock all the same, and a wheel build must not overlap other builds in the same
/// target directory (maturin moves the library it built out of `target/release` while it
/// packs the wheel). Each scenario's time is then its own, not time spent waiting.
static HEAVY: Mutex<()> = Mutex::new(());

/// The port the documents' servers listen on (`loopguard serve`'s default).
const DOCS_PORT: u16 = 7671;

/// How long a serving scenario waits for the port to be free before it fails.
const PORT_WAIT: Duration = Duration::from_secs(300);

/// The documents' port, held by a scenario whose blocks start a server on it: an exclusive
/// lock on a file in the machine's temporary directory, so serving scenarios run one at a
/// time across this test's threads and every other process running these tests (another
/// checkout's CI, a developer's second run), released when the scenario ends (or its
/// process dies). Taken, it also waits for the port to be free of servers the lock does
/// not know (one still stopping, one a user started), and fails saying so when it stays
/// taken.
struct PortLock {
    _file: std::fs::File,
}

impl PortLock {
    fn take() -> Self {
        let path = std::env::temp_dir().join(format!("loopguard-doc-tests-port-{DOCS_PORT}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
        let start = Instant::now();
        while let Err(e) = std::net::TcpListener::bind(("127.0.0.1", DOCS_PORT)) {
            assert!(
                start.elapsed() < PORT_WAIT,
                "127.0.0.1:{DOCS_PORT} stayed taken for {PORT_WAIT:?} ({e}): the documents' \
servers listen there; stop whatever holds it (`ss -ltnp 'sport = {DOCS_PORT}'`) and run again"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        Self { _file: file }
    }
}

/// What one run block printed.
#[derive(Debug)]
struct Ran {
    stdout: String,
}

/// A scenario's sandbox: a home, a bin directory, a working directory, and the servers its
/// blocks started.
struct Sandbox {
    root: tempfile::TempDir,
    env: Vec<(String, String)>,
    servers: Vec<(Child, String)>,
    git_status: String,
    blocks: usize,
    heavy: bool,
}

fn git_status() -> String {
    let out = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(repo_root())
        .output()
        .expect("git status");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The real user's tool homes: the sandbox's `HOME` is new, the toolchains are not.
fn tool_home(var: &str, under_home: &str) -> Option<String> {
    std::env::var(var).ok().or_else(|| {
        let home = std::env::var("HOME").ok()?;
        let dir = Path::new(&home).join(under_home);
        dir.is_dir().then(|| dir.display().to_string())
    })
}

impl Sandbox {
    fn new(checkout: bool, heavy: bool) -> Self {
        let root = tempfile::tempdir().unwrap();
        let (home, bin, work) = (
            root.path().join("home"),
            root.path().join("bin"),
            root.path().join("work"),
        );
        for dir in [&home, &bin, &work] {
            std::fs::create_dir_all(dir).unwrap();
        }
        // Installed binaries, outside the build directory (`hook install` refuses those).
        for (name, built) in [
            ("loopguard", env!("CARGO_BIN_EXE_loopguard")),
            ("loopguard-hook", env!("CARGO_BIN_EXE_loopguard-hook")),
        ] {
            std::fs::copy(built, bin.join(name)).unwrap();
        }
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut env = vec![
            ("HOME".to_owned(), home.display().to_string()),
            ("PATH".to_owned(), path),
        ];
        for (var, dir) in [("CARGO_HOME", ".cargo"), ("RUSTUP_HOME", ".rustup")] {
            if let Some(value) = tool_home(var, dir) {
                env.push((var.to_owned(), value));
            }
        }
        let cwd = if checkout { repo_root() } else { work };
        std::fs::write(root.path().join("cwd"), cwd.display().to_string()).unwrap();
        std::fs::write(root.path().join("state.sh"), "").unwrap();
        Self {
            root,
            env,
            servers: Vec::new(),
            git_status: git_status(),
            blocks: 0,
            heavy,
        }
    }

    /// A bash that runs `script` in the scenario's state (variables, working directory),
    /// stops at the first failing command, and saves the state again.
    fn bash(&mut self, script: &str) -> Command {
        self.blocks += 1;
        let dir = self.root.path();
        let file = dir.join(format!("block-{}.sh", self.blocks));
        std::fs::write(&file, script).unwrap();
        let driver = format!(
            r#"set -E
trap 'status=$?; echo "doc-test: failed with status $status: $BASH_COMMAND" >&2; exit $status' ERR
. {dir}/state.sh
cd "$(cat {dir}/cwd)"
. {file}
declare -px | grep -Ev '^declare -[a-zA-Z]*r' > {dir}/state.sh
pwd > {dir}/cwd
"#,
            dir = dir.display(),
            file = file.display()
        );
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-c", &driver]);
        cmd.env_clear();
        for (key, value) in std::env::vars() {
            let dropped = key.starts_with("LOOPGUARD_")
                || key.starts_with("XDG_")
                || key.starts_with("CARGO_PKG_")
                || matches!(
                    key.as_str(),
                    "VIRTUAL_ENV" | "CARGO_MANIFEST_DIR" | "RUST_LOG"
                );
            if !dropped {
                cmd.env(key, value);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    fn limit(&self) -> Duration {
        if self.heavy {
            Duration::from_secs(60 * 60)
        } else {
            Duration::from_secs(180)
        }
    }

    /// Runs `script` to its end; returns its stdout, or panics with what went wrong.
    fn run(&mut self, at: &str, script: &str) -> Ran {
        let limit = self.limit();
        let (out, err) = (
            self.root.path().join("stdout"),
            self.root.path().join("stderr"),
        );
        let mut child = self
            .bash(script)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        let status = wait(&mut child, limit);
        let stdout = std::fs::read_to_string(&out).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err).unwrap_or_default();
        match status {
            Some(status) if status.success() => {}
            Some(status) => panic!(
                "{at}: the block failed ({status}):\n{script}\n--- stdout:\n{}\n--- stderr:\n{}",
                tail(&stdout),
                tail(&stderr)
            ),
            None => {
                stop_group(&mut child);
                panic!(
                    "{at}: the block did not finish within {limit:?}:\n{script}\n--- stdout:\n{}\n--- stderr:\n{}",
                    tail(&stdout),
                    tail(&stderr)
                )
            }
        }
        self.check_git(at);
        Ran { stdout }
    }

    /// Starts `script`, a block that ends by starting a server, and waits until the server
    /// listens.
    fn serve(&mut self, at: &str, script: &str) {
        let limit = self.limit();
        let log = self
            .root
            .path()
            .join(format!("server-{}.log", self.blocks + 1));
        let file = std::fs::File::create(&log).unwrap();
        let mut child = self
            .bash(script)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .process_group(0)
            .spawn()
            .unwrap();
        let start = Instant::now();
        loop {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            if said.contains("listening on http://") {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "{at}: the server block ended ({status}) before listening:\n{script}\n{}",
                    tail(&said)
                );
            }
            if start.elapsed() > limit {
                stop_group(&mut child);
                panic!(
                    "{at}: no server listening within {limit:?}:\n{script}\n{}",
                    tail(&said)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        self.servers.push((child, at.to_owned()));
    }

    fn check_git(&self, at: &str) {
        let now = git_status();
        assert_eq!(
            now, self.git_status,
            "{at}: the checkout changed (git status --porcelain before, then after)"
        );
    }

    /// Stops the servers (SIGTERM to each block's process group); each must stop.
    fn finish(mut self) {
        for (mut child, at) in std::mem::take(&mut self.servers) {
            stop_group(&mut child);
            assert!(
                wait(&mut child, Duration::from_secs(30)).is_some(),
                "{at}: the server did not stop on SIGTERM"
            );
        }
        self.check_git("after the scenario");
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for (child, _) in &mut self.servers {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
        }
    }
}

/// SIGTERM to the process group of `child` (bash and what it started).
fn stop_group(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", child.id())])
        .status();
}

fn wait(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if start.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn tail(text: &str) -> &str {
    let cut = text.len().saturating_sub(6000);
    let cut = (cut..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    &text[cut..]
}

/// A transcript's commands (`$ ` lines, with their `\` continuations) and the output
/// shown after each.
fn transcript(text: &str) -> Vec<(String, String)> {
    let mut steps: Vec<(String, String)> = Vec::new();
    let mut continued = false;
    for line in text.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push((command.to_owned(), String::new()));
            continued = command.ends_with('\\');
        } else if let Some((command, output)) = steps.last_mut() {
            if continued {
                command.push('\n');
                command.push_str(line);
                continued = line.ends_with('\\');
            } else {
                output.push_str(line);
                output.push('\n');
            }
        }
    }
    steps
}

/// Runs the blocks of scenario `name` (or the one unnamed block at `only`), in document
/// order; returns what each printed, by its location.
fn run_scenario(blocks: &[Block], name: Option<&str>, only: Option<&str>) -> Vec<(String, Ran)> {
    let chosen: Vec<(usize, &Block)> = blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| match &b.marker {
            Some(Marker::Run { scenario, .. }) => match (name, only) {
                (Some(n), _) => scenario.as_deref() == Some(n),
                (None, Some(at)) => b.at() == at,
                (None, None) => false,
            },
            _ => false,
        })
        .collect();
    assert!(
        !chosen.is_empty(),
        "no blocks for scenario {name:?} {only:?}"
    );
    let (checkout, serves, heavy) =
        chosen
            .iter()
            .fold((false, false, false), |acc, (_, b)| match &b.marker {
                Some(Marker::Run {
                    checkout,
                    serves,
                    heavy,
                    ..
                }) => (acc.0 || *checkout, acc.1 || *serves, acc.2 || *heavy),
                _ => acc,
            });
    let _heavy = heavy.then(|| HEAVY.lock().unwrap_or_else(|p| p.into_inner()));
    let _port = serves.then(PortLock::take);
    let started = Instant::now();
    let mut sandbox = Sandbox::new(checkout, heavy);
    let mut out = Vec::new();
    for (i, block) in chosen {
        let at = block.at();
        let Some(Marker::Run { serves, .. }) = &block.marker else {
            unreachable!("chosen for their run markers")
        };
        let script = match block.lang.as_str() {
            "python" => format!(
                "python3 - <<'LOOPGUARD_DOC_PYTHON'\n{}\nLOOPGUARD_DOC_PYTHON\n",
                block.text
            ),
            "js" => format!(
                "node - <<'LOOPGUARD_DOC_JS'\n{}\nLOOPGUARD_DOC_JS\n",
                block.text
            ),
            _ => block.text.clone(),
        };
        if *serves {
            sandbox.serve(&at, &script);
            continue;
        }
        let steps = transcript(&block.text);
        if steps.is_empty() {
            let ran = sandbox.run(&at, &script);
            // The output block after it, if any, is what it prints.
            if let Some(expected) = blocks
                .get(i + 1)
                .filter(|b| b.file == block.file && b.marker == Some(Marker::Output))
            {
                assert_eq!(
                    ran.stdout.trim_end(),
                    expected.text.trim_end(),
                    "{at}: stdout differs from the output shown at {}",
                    expected.at()
                );
            }
            out.push((at, ran));
        } else {
            for (command, shown) in steps {
                let ran = sandbox.run(&at, &command);
                if !shown.trim().is_empty() {
                    assert_eq!(
                        ran.stdout.trim_end(),
                        shown.trim_end(),
                        "{at}: `{command}` prints other than the document shows"
                    );
                }
                out.push((at.clone(), ran));
            }
        }
    }
    sandbox.finish();
    // Written to the process's stderr, past the test harness's capture, so that every run
    // (CI's included) shows what each documented route costs on its machine.
    let _ = writeln!(
        std::io::stderr(),
        "doc-test scenario {}: {:.1} s",
        name.or(only).unwrap_or("?"),
        started.elapsed().as_secs_f64()
    );
    out
}

/// Scenarios with a test of their own below.
const OWN_TESTS: [&str; 4] = ["quickstart", "python", "node-install", "mcp-check"];

/// Every light block and scenario, one after the other.
#[test]
fn the_documented_commands_run_as_written() {
    let blocks = all_blocks();
    let mut named: Vec<String> = Vec::new();
    let mut single: Vec<String> = Vec::new();
    for block in &blocks {
        if let Some(Marker::Run {
            scenario, heavy, ..
        }) = &block.marker
        {
            match scenario {
                Some(name) if OWN_TESTS.contains(&name.as_str()) => {}
                _ if *heavy && !heavy_allowed() => {
                    eprintln!("skipped (heavy; CI runs it): {}", block.at());
                }
                Some(name) if !named.contains(name) => named.push(name.clone()),
                Some(_) => {}
                None => single.push(block.at()),
            }
        }
    }
    for name in &named {
        run_scenario(&blocks, Some(name), None);
    }
    for at in &single {
        run_scenario(&blocks, None, Some(at));
    }
}

fn heavy_scenario(name: &str) -> Option<Vec<(String, Ran)>> {
    if !heavy_allowed() {
        eprintln!("skipped: set LOOPGUARD_TEST_DOCS=1 (CI runs it)");
        return None;
    }
    Some(run_scenario(&all_blocks(), Some(name), None))
}

/// README's quick start: `cargo run --release -p loopguard-cli -- serve` on the embedded
/// default store, the curl loop against it, and the replay line.
#[test]
fn readme_quick_start() {
    heavy_scenario("quickstart");
}

/// docs/python.md: `pip install ./crates/loopguard-python` (and an extra) into a fresh
/// virtualenv, then the quick-start example.
#[test]
fn python_from_the_checkout() {
    heavy_scenario("python");
}

/// docs/node.md: scripts/npm-pack, the tarball installed into a project, the addon
/// loaded from it.
#[test]
fn node_from_the_checkout() {
    heavy_scenario("node-install");
}

/// docs/mcp-proxy.md's check, as written (the real `server-everything`, fetched by npx):
/// every request id answered exactly once, id 4 warned, id 5 the proxy's block.
#[test]
fn the_mcp_proxy_check_answers_every_id() {
    let Some(ran) = heavy_scenario("mcp-check") else {
        return;
    };
    let (at, last) = ran.last().expect("the check ran");
    let answers: Vec<Value> = last
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|m: &Value| m.get("id").is_some())
        .collect();
    let mut ids: Vec<u64> = answers.iter().filter_map(|a| a["id"].as_u64()).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2, 3, 4, 5], "{at}: {}", last.stdout);
    let by_id = |id: u64| answers.iter().find(|a| a["id"] == id).unwrap();
    let mut texts = String::new();
    for block in by_id(4)["result"]["content"].as_array().unwrap() {
        let _ = write!(texts, "{} ", block["text"]);
    }
    assert!(
        texts.contains("[loopguard] WARNING: you have called echo 2 times"),
        "{texts}"
    );
    assert_eq!(by_id(5)["result"]["isError"], true);
    assert!(by_id(5)["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("CRITICAL: echo was called 3 times"));
}

#[test]
fn markers_parse() {
    assert_eq!(
        parse_marker("<!-- doc-test: run quickstart checkout serves heavy -->").unwrap(),
        Marker::Run {
            scenario: Some("quickstart".into()),
            checkout: true,
            serves: true,
            heavy: true
        }
    );
    assert_eq!(
        parse_marker("<!-- doc-test: not run: needs Docker; equivalent: Dockerfile -->").unwrap(),
        Marker::NotRun {
            reason: "needs Docker".into(),
            equivalent: "Dockerfile".into()
        }
    );
    assert!(parse_marker("<!-- doc-test: run a b -->").is_err());
    assert!(parse_marker("<!-- doc-test: maybe -->").is_err());
    assert_eq!(
        transcript("$ a \\\n  b\nout 1\nout 2\n$ c\n"),
        vec![
            ("a \\\n  b".to_owned(), "out 1\nout 2\n".to_owned()),
            ("c".to_owned(), String::new())
        ]
    );
}

/// The sandbox itself: a failing command fails its block (not only the last one), and
/// what a block exports or `cd`s into, the next block sees.
#[test]
fn blocks_fail_on_any_command_and_keep_their_state() {
    let mut sandbox = Sandbox::new(false, false);
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sandbox.run("first", "false\necho after");
    }));
    assert!(failed.is_err(), "a failing first command fails the block");
    let mut sandbox = Sandbox::new(false, false);
    sandbox.run(
        "export",
        "mkdir inner && cd inner\nexport DOC_TEST_VALUE=kept",
    );
    let ran = sandbox.run(
        "read",
        "echo \"$DOC_TEST_VALUE $(basename \"$PWD\") $HOME\"",
    );
    let home = sandbox.root.path().join("home");
    assert_eq!(ran.stdout.trim(), format!("kept inner {}", home.display()));
    let ran = sandbox.run(
        "env",
        "echo \"${LOOPGUARD_CONFIG:-unset} $(command -v loopguard)\"",
    );
    assert_eq!(
        ran.stdout.trim(),
        format!(
            "unset {}",
            sandbox.root.path().join("bin/loopguard").display()
        )
    );
    sandbox.finish();
}

/// `scripts/test` builds the Python wheel it tests into a folder of its own, emptied first:
/// `pip install ./crates/loopguard-python` and `maturin build` write to target/wheels, and
/// a second wheel there made the test install fail.
#[test]
fn scripts_test_builds_its_wheel_apart() {
    let script = std::fs::read_to_string(repo_root().join("scripts/test")).unwrap();
    let folder = script
        .lines()
        .find_map(|l| l.strip_prefix("lg_test_wheels="))
        .expect("scripts/test names its wheel folder");
    assert!(
        folder.starts_with("target/") && folder != "target/wheels",
        "{folder}"
    );
    for needle in [
        "rm -rf \"$lg_test_wheels\"",
        "-o \"$lg_test_wheels\"",
        "\"$lg_test_wheels\"/*.whl",
    ] {
        assert!(script.contains(needle), "scripts/test: {needle}");
    }
    assert!(
        !script.contains("target/wheels/"),
        "nothing is taken from target/wheels"
    );
}

/// The README's fuzzing section names every fuzz target `fuzz/Cargo.toml` declares, and
/// no other.
#[test]
fn the_readme_names_every_fuzz_target() {
    let root = repo_root();
    let manifest = std::fs::read_to_string(root.join("fuzz/Cargo.toml")).unwrap();
    let declared: std::collections::BTreeSet<&str> = manifest
        .split("[[bin]]")
        .skip(1)
        .filter_map(|bin| {
            let name = bin.lines().find_map(|l| l.strip_prefix("name = "))?;
            Some(name.trim().trim_matches('"'))
        })
        .collect();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("### Fuzzing")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("the README has a fuzzing section");
    let named: std::collections::BTreeSet<&str> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|name| name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
        .collect();
    assert!(declared.len() >= 20, "{declared:?}");
    assert_eq!(
        named, declared,
        "README's fuzzing section against fuzz/Cargo.toml"
    );
}
