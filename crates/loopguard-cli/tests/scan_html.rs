//! `loopguard scan --html` opened in a real headless Chromium: the page must render one
//! timeline per session (counted in the DOM after its script ran) and make a screenshot.
//!
//! Chromium comes from Debian's `chromium` package, which `scripts/setup/chromium.sh`
//! installs (scripts/test sources it). Without it the test prints SKIPPED, except on CI
//! (`CI` set), where a missing browser is a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{run, shared_dir};
use serde_json::Value;

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in ["chromium", "chromium-browser"] {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "loopguard-html-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs headless Chromium on `page` with `extra` flags; returns its stdout.
fn browse(browser: &Path, page: &Path, extra: &[String]) -> String {
    let profile = tempdir("profile");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).ok();
        out
    });
    let started = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    out
}

/// Writes the HTML report of `inputs`; returns its path and the session count of the JSON.
fn report(inputs: &[&Path], dir: &Path) -> (PathBuf, u64) {
    let page = dir.join("report.html");
    let mut args = vec!["scan", "--json", "--html", page.to_str().unwrap()];
    args.extend(inputs.iter().map(|p| p.to_str().unwrap()));
    let out = run(&args, b"");
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 2),
        "{:?}",
        out
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    (page, doc["summary"]["sessions"].as_u64().unwrap())
}

/// Checks the rendered DOM and the screenshot of `page`.
fn check(browser: &Path, page: &Path, sessions: u64, dir: &Path) {
    let dom = browse(browser, page, &["--dump-dom".into()]);
    assert!(
        dom.contains("<h1>loopguard scan</h1>"),
        "no page rendered:\n{dom:.500}"
    );
    assert_eq!(
        dom.matches("<section class=\"session").count() as u64,
        sessions,
        "one section per session"
    );
    assert!(
        dom.contains(&format!("data-rendered-sessions=\"{sessions}\"")),
        "the page script counted the timelines it rendered"
    );
    let shot = dir.join("report.png");
    browse(
        browser,
        page,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,1600".into(),
        ],
    );
    let png = std::fs::read(&shot).expect("screenshot written");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!((width, height), (1280, 1600));
    assert!(
        png.len() > 20_000,
        "a page with timelines, not a blank one ({} bytes)",
        png.len()
    );
}

#[test]
fn html_report_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        if std::env::var_os("CI").is_some() {
            panic!("chromium is missing on CI: scripts/setup/chromium.sh should have installed it");
        }
        println!("SKIPPED: chromium not found (scripts/setup/chromium.sh installs it)");
        return;
    };
    let dir = tempdir("fixtures");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scan");
    let (page, sessions) = report(&[&fixtures], &dir);
    assert_eq!(sessions, 8, "seven sessions and one Claude Code subagent");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "self-contained: nothing to fetch"
    );
    check(&browser, &page, sessions, &dir);
    let _ = std::fs::remove_dir_all(&dir);

    match shared_dir() {
        None => println!("SKIPPED: corpus page (shared folder not found)"),
        Some(shared) => {
            let dir = tempdir("corpus");
            let (page, sessions) = report(&[&shared.join("corpus")], &dir);
            assert!(sessions > 200);
            check(&browser, &page, sessions, &dir);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// What looped, on the page itself: each loop's row names the tool, the arguments and
/// outcome of its first flagged call, and the transcript line of each step; sessions
/// without findings start hidden, the checkbox unticked.
#[test]
fn the_page_says_what_looped_and_hides_quiet_sessions() {
    let dir = tempdir("what");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/scan");
    let (page, _) = report(&[&fixtures.join("openclaw-loop.jsonl")], &dir);
    let html = std::fs::read_to_string(&page).unwrap();
    let row = html
        .split("<tr class=\"critical\">")
        .nth(1)
        .and_then(|r| r.split("</tr>").next())
        .expect("a row for the blocked loop");
    for needle in [
        "<td>read</td>",
        "<td class=\"what\">{&quot;path&quot;:&quot;/home/demo/project/NOTES.md&quot;}</td>",
        "<td class=\"what\">error: ENOENT: no such file or directory, open &#39;/home/demo/project/NOTES.md&#39;</td>",
        "call 11 (line 24) · generic_repeat 10",
        "call 21 (line 44) · generic_repeat 20",
    ] {
        assert!(row.contains(needle), "missing {needle:?} in {row}");
    }
    assert!(
        html.contains("<body class=\"hide-quiet\">"),
        "quiet sessions start hidden"
    );
    assert!(
        html.contains("<input type=\"checkbox\" id=\"quiet\">"),
        "unticked"
    );
    // Long arguments are cut to a readable length.
    let long = "x".repeat(500);
    let events: String = (0..12)
        .map(|i| {
            format!(
                "{{\"type\":\"call\",\"session\":\"s\",\"call_id\":\"c{i}\",\"tool\":\"write\",\"args\":{{\"text\":\"{long}\"}}}}\n{{\"type\":\"result\",\"session\":\"s\",\"call_id\":\"c{i}\",\"result\":\"{long}\"}}\n"
            )
        })
        .collect();
    let input = dir.join("long.jsonl");
    std::fs::write(&input, events).unwrap();
    let (page, _) = report(&[&input], &dir);
    let html = std::fs::read_to_string(&page).unwrap();
    let args = html
        .split("<td class=\"what\">")
        .nth(1)
        .and_then(|c| c.split("</td>").next())
        .unwrap()
        .replace("&quot;", "\"");
    assert!(args.ends_with('…') && args.chars().count() == 160, "{args}");
    let _ = std::fs::remove_dir_all(&dir);
}
